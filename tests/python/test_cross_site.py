"""stintd moves a job between two sites that share no disk, through an
object store (issue 43): examples/cross_site/cross_site_demo.py, run whole.
A real `rclone serve s3`, stintd, two stint-agent nodes (pools "onprem" and
"cloud", each node with a checkpoint root of its own) and a stint.Resumable
training job replicating to the bucket. The demo checks that the job moved
by price migration only once its steps were in the bucket, that the cloud
node resumed at the emergency checkpoint's step with an empty root of its
own, that its final parameters are bit-identical to an uninterrupted run,
and that stintd's store holds no credential; it exits non-zero otherwise.

Needs stintd, stint-agent, stintctl ($STINTD_PATH's build tree) and rclone
in the venv; skipped without them.
"""

import os
import subprocess
import sys

import pytest

from test_elastic import REPO, STINTD

BUILD = os.path.dirname(os.path.dirname(os.path.dirname(STINTD))) if STINTD else ""
DEMO = os.path.join(REPO, "examples", "cross_site", "cross_site_demo.py")
RCLONE = os.path.join(os.path.dirname(sys.executable), "rclone")


def test_a_job_moves_to_a_site_that_shares_only_the_bucket_and_resumes_bit_exactly(tmp_path):
    for tool in ([STINTD] if STINTD else []) + [
            os.path.join(BUILD, "tools", "stint-agent", "stint-agent"),
            os.path.join(BUILD, "tools", "stintctl", "stintctl"), RCLONE]:
        if not tool or not os.access(tool, os.X_OK):
            pytest.skip("%s is not built or installed" % (tool or "stintd"))
    # The demo has its own deadline (its time limit) for every wait; this
    # one only bounds a hang of the demo itself.
    out = subprocess.run([sys.executable, DEMO, "--build", BUILD, "--steps", "300",
                          "--save-every", "20", "--step-sleep", "0.05", "--time-limit", "400",
                          "--work-root", str(tmp_path)],
                         capture_output=True, text=True, timeout=550)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "cross_site_demo: OK" in out.stdout, text
    assert "checkpoints stored at:" in out.stdout, text  # stintctl jobs show
    assert "s3://ckpts/runs" in out.stdout, text         # stintctl pools list
