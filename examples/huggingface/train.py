"""A transformers.Trainer run checkpointed through stint: a tiny GPT-2 built
from its config (nothing downloaded), save_steps checkpoints saved
asynchronously, exit 75 after an emergency checkpoint on SIGTERM, and
resume_from_checkpoint=True from the newest durable step.

    HF_HUB_OFFLINE=1 python examples/huggingface/train.py --out /tmp/stint-hf
    # kill -TERM <pid>: exits 75; run it again to resume

--record writes one line per step ("step <sum of the parameters>.hex()");
--pause-at N (tests) waits at step N for the signal.
"""

import argparse
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, TrainerCallback, TrainingArguments

from stint.huggingface import Trainer


class Record(TrainerCallback):
    def __init__(self, path, pause_at, trainer_ref):
        self.path, self.pause_at, self.trainer_ref = path, pause_at, trainer_ref

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.path:
            total = sum(p.detach().double().sum().item() for p in model.parameters())
            with open(self.path, "a") as f:
                f.write("%d %s\n" % (state.global_step, float(total).hex()))
        if self.pause_at == state.global_step:
            with open(self.path + ".paused", "w") as f:
                f.write(str(os.getpid()))
            self.trainer_ref[0].preemption.watcher.wait(120)  # the test's signal


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--record")
    p.add_argument("--pause-at", type=int)
    a = p.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128,
                                       n_positions=32))
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 128, (40, 16), generator=g)]
    args = TrainingArguments(output_dir=os.path.join(a.out, "hf"), max_steps=a.steps, save_steps=4,
                             per_device_train_batch_size=4, learning_rate=1e-3, use_cpu=True,
                             report_to=[], logging_steps=100, seed=0, save_strategy="steps",
                             disable_tqdm=True, dataloader_num_workers=0)
    ref = [None]
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      stint_root=os.path.join(a.out, "stint"),
                      callbacks=[Record(a.record, a.pause_at, ref)])
    ref[0] = trainer
    resume = os.path.isdir(args.output_dir) and any(
        n.startswith("checkpoint-") for n in os.listdir(args.output_dir))
    trainer.train(resume_from_checkpoint=True if resume else None)
    trainer.close_stint()
    return 0


if __name__ == "__main__":
    sys.exit(main())
