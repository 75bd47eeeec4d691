#include "checkpoint/replica.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "checkpoint/commit.h"
#include "format/manifest.h"
#include "stint/checkpoint_reader.h"

namespace stint {
namespace {

uint64_t Nonce() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^
         uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
}

Status CopyFile(Env* src_env, const std::string& from, Env* dst_env, const std::string& to,
                std::vector<char>* buf, uint64_t* copied) {
  STINT_ASSIGN_OR_RETURN(auto in, src_env->NewRandomAccessFile(from, FileOptions{}));
  STINT_ASSIGN_OR_RETURN(uint64_t size, in->Size());
  STINT_ASSIGN_OR_RETURN(auto out, dst_env->NewWritableFile(to, FileOptions{}));
  Status s = out->Allocate(size);  // a full replica disk fails here, before any data
  for (uint64_t off = 0; s.ok() && off < size;) {
    auto n = in->Read(off, std::min<uint64_t>(buf->size(), size - off), buf->data());
    if (!n.ok()) {
      s = n.status();
      break;
    }
    if (*n == 0) {
      s = Status::DataLoss(from + ": shrank while being replicated");
      break;
    }
    s = out->PositionedWrite(buf->data(), *n, off);
    off += *n;
    if (s.ok() && copied) *copied += *n;
  }
  if (s.ok()) s = out->Sync();
  Status closed = out->Close();  // closed whatever it returns
  if (s.ok()) s = closed;
  return s;
}

}  // namespace

Status ReplicateCheckpoint(Env* src_env, const std::string& src_root, Env* dst_env,
                           const std::string& dst_root, uint64_t step, const ReplicateOptions& options,
                           uint64_t* copied) {
  const std::string name = StepDirName(step);
  const std::string src = src_root + "/" + name;
  if (!src_env->FileExists(src + "/" + kManifestName)) {
    return Status::NotFound(src + ": not committed (deleted by retention before replication?)");
  }
  Status made = dst_env->CreateDir(dst_root);
  if (!made.ok() && made.code() != Code::kAlreadyExists) return made.WithContext("replica root");
  if (dst_env->FileExists(dst_root + "/" + name + "/" + kManifestName)) return Status::OK();

  STINT_ASSIGN_OR_RETURN(std::string manifest, ReadFileToString(src_env, src + "/" + kManifestName));
  STINT_ASSIGN_OR_RETURN(auto children, src_env->GetChildren(src));
  const std::string tmp = dst_root + "/" + TmpDirName(step, Nonce());
  STINT_RETURN_IF_ERROR(dst_env->CreateDir(tmp));
  std::vector<char> buf(options.copy_bytes == 0 ? (1u << 20) : options.copy_bytes);
  Status s;
  for (const auto& child : children) {
    if (child == kManifestName) continue;  // written last, by the commit
    s = CopyFile(src_env, src + "/" + child, dst_env, tmp + "/" + child, &buf, copied);
    if (!s.ok()) break;
  }
  if (s.ok()) {
    // The guard runs after the manifest is written and synced, before the rename:
    // the copy is checked exactly as a load would check it.
    auto verify = [&](uint64_t) -> Status {
      if (!options.verify) return Status::OK();
      ReaderOptions ro;
      ro.env = dst_env;
      ro.io_engine = "posix";
      ro.direct_io = false;
      STINT_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(tmp, ro));
      return reader->Verify().status().WithContext("verifying the replica");
    };
    s = CommitCheckpoint(dst_env, dst_root, tmp, step, manifest, verify);
    if (s.ok() && copied) *copied += manifest.size();
  }
  if (!s.ok() && dst_env->FileExists(tmp)) RemoveRecursively(dst_env, tmp).IgnoreError();
  return s.WithContext("replicate " + src + " to " + dst_root);
}

}  // namespace stint
