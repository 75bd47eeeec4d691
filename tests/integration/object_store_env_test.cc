// ObjectStoreEnv against a real S3-compatible server: `rclone serve s3` on
// loopback (util/rclone_s3.h), started per test; without rclone every test
// skips with the reason. Local paths go to Env::Default() on a TempDir.
#include "objstore/object_store_env.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "objstore/s3_client.h"
#include "util/rclone_s3.h"
#include "util/status_matchers.h"
#include "util/temp_dir.h"

namespace stint {
namespace {

constexpr size_t kPart = kObjectPartBytes;

class ObjectStoreEnvTest : public RcloneS3Test {
 protected:
  void SetUp() override {
    RcloneS3Test::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    env_ = std::make_unique<ObjectStoreEnv>(Config(), Env::Default());
    auto client = env_->Client(kBucket);
    ASSERT_OK(client);
    s3_ = *client;
  }

  static std::string Path(const std::string& key) { return std::string("s3://ckpt/") + key; }

  // Uploads left in progress under `prefix`; none where the server cannot
  // list them. rclone (gofakes3) answers 404 NoSuchUpload for a bucket that
  // never had an upload, where S3 lists none.
  size_t UploadsLeft(const std::string& prefix) {
    auto uploads = s3_->ListMultipartUploads(prefix);
    if (!uploads.ok() && (uploads.status().code() == Code::kUnimplemented ||
                          uploads.status().message().find("NoSuchUpload") != std::string::npos)) {
      return 0;
    }
    EXPECT_OK(uploads);
    return uploads.ok() ? uploads->size() : 0;
  }

  bool Exists(const std::string& key) { return s3_->HeadObject(key).ok(); }

  std::unique_ptr<WritableFile> NewFile(const std::string& key) {
    auto file = env_->NewWritableFile(Path(key), FileOptions{});
    EXPECT_OK(file);
    return file.ok() ? std::move(file).value() : nullptr;
  }

  std::unique_ptr<ObjectStoreEnv> env_;
  S3Client* s3_ = nullptr;  // env_'s client for kBucket
};

TEST_F(ObjectStoreEnvTest, WholePartsFromFourThreadsOutOfOrderAndATailReadBackExact) {
  const std::string data = Pattern(3 * kPart + 1234, 1);
  auto file = NewFile("big/shard");
  ASSERT_NE(file, nullptr);
  ASSERT_OK(file->Allocate(data.size()));
  // The tail, then parts 3, 1, 2, each from its own thread, all at once.
  const std::vector<std::pair<size_t, size_t>> writes = {
      {3 * kPart, 1234}, {2 * kPart, kPart}, {0, kPart}, {kPart, kPart}};
  std::vector<Status> results(writes.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < writes.size(); ++i) {
    threads.emplace_back([&, i] {
      const auto [offset, n] = writes[i];
      results[i] = file->PositionedWrite(data.data() + offset, n, offset);
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) ASSERT_OK(s);
  // Uploaded parts are not an object yet.
  EXPECT_EQ(s3_->HeadObject("big/shard").status().code(), Code::kNotFound);
  ASSERT_OK(file->Sync());
  ASSERT_OK(file->Close());

  auto reader = env_->NewRandomAccessFile(Path("big/shard"), FileOptions{});
  ASSERT_OK(reader);
  EXPECT_EQ(*(*reader)->Size(), data.size());
  std::string got(data.size(), '\0');
  auto n = (*reader)->Read(0, got.size(), got.data());
  ASSERT_OK(n);
  EXPECT_EQ(*n, data.size());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(UploadsLeft("big/"), 0u);
}

TEST_F(ObjectStoreEnvTest, OneWriteOfSeveralPartsAndATailIsOneObject) {
  const std::string data = Pattern(2 * kPart + 17, 2);
  auto file = NewFile("one/shard");
  ASSERT_NE(file, nullptr);
  ASSERT_OK(file->PositionedWrite(data.data(), data.size(), 0));
  ASSERT_OK(file->Fsync());
  ASSERT_OK(file->Close());
  auto got = ReadFileToString(env_.get(), Path("one/shard"));
  ASSERT_OK(got);
  EXPECT_TRUE(*got == data);
}

TEST_F(ObjectStoreEnvTest, EnvHelpersWriteAndReadASmallFile) {
  const std::string data = Pattern(5000, 3);
  ASSERT_OK(WriteStringToFileSync(env_.get(), Path("small/manifest.json"), data));
  auto got = ReadFileToString(env_.get(), Path("small/manifest.json"));
  ASSERT_OK(got);
  EXPECT_TRUE(*got == data);
  EXPECT_EQ(UploadsLeft("small/"), 0u);  // a PutObject, not a multipart upload
  // Replacing it with a shorter one.
  ASSERT_OK(WriteStringToFileSync(env_.get(), Path("small/manifest.json"), "v2"));
  EXPECT_EQ(*ReadFileToString(env_.get(), Path("small/manifest.json")), "v2");
}

TEST_F(ObjectStoreEnvTest, AnEmptyFileIsAnEmptyObject) {
  auto file = NewFile("empty");
  ASSERT_NE(file, nullptr);
  ASSERT_OK(file->Sync());
  ASSERT_OK(file->Close());
  auto head = s3_->HeadObject("empty");
  ASSERT_OK(head);
  EXPECT_EQ(head->size, 0u);
  auto got = ReadFileToString(env_.get(), Path("empty"));
  ASSERT_OK(got);
  EXPECT_EQ(*got, "");
}

TEST_F(ObjectStoreEnvTest, NothingAppearsBeforeSyncNorAfterCloseWithoutSync) {
  const std::string data = Pattern(kPart + 10, 4);
  auto file = NewFile("unsynced/shard");
  ASSERT_NE(file, nullptr);
  ASSERT_OK(file->PositionedWrite(data.data(), data.size(), 0));
  EXPECT_EQ(s3_->HeadObject("unsynced/shard").status().code(), Code::kNotFound);
  EXPECT_FALSE(env_->FileExists(Path("unsynced/shard")));
  EXPECT_EQ(UploadsLeft("unsynced/"), 1u);  // its whole part went up already
  ASSERT_OK(file->Close());                 // aborts the multipart upload
  EXPECT_EQ(s3_->HeadObject("unsynced/shard").status().code(), Code::kNotFound);
  EXPECT_EQ(UploadsLeft("unsynced/"), 0u);
  // Destroyed without Close: the same.
  file = NewFile("dropped/shard");
  ASSERT_OK(file->PositionedWrite(data.data(), kPart, 0));
  file.reset();
  EXPECT_FALSE(Exists("dropped/shard"));
  EXPECT_EQ(UploadsLeft("dropped/"), 0u);
}

TEST_F(ObjectStoreEnvTest, WritesAfterSyncOrCloseFail) {
  auto file = NewFile("done");
  ASSERT_NE(file, nullptr);
  ASSERT_OK(file->PositionedWrite("abc", 3, 0));
  ASSERT_OK(file->Sync());
  const Status late = file->PositionedWrite("d", 1, kPart);
  EXPECT_EQ(late.code(), Code::kFailedPrecondition) << late.ToString();
  ASSERT_OK(file->Close());
  EXPECT_FALSE(file->PositionedWrite("d", 1, 0).ok());
  EXPECT_EQ(*ReadFileToString(env_.get(), Path("done")), "abc");
}

TEST_F(ObjectStoreEnvTest, AWriteOffAPartBoundaryIsInvalidArgument) {
  auto file = NewFile("unaligned");
  ASSERT_NE(file, nullptr);
  const Status s = file->PositionedWrite("x", 1, 4096);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("offset 4096"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("s3://ckpt/unaligned"), std::string::npos) << s.ToString();
  // Two shorter pieces: only one may end the object.
  ASSERT_OK(file->PositionedWrite("abc", 3, 0));
  const Status second = file->PositionedWrite("def", 3, kPart);
  EXPECT_EQ(second.code(), Code::kInvalidArgument) << second.ToString();
  ASSERT_OK(file->Close());
}

TEST_F(ObjectStoreEnvTest, AGapIsInvalidArgumentAtSyncAndNothingAppears) {
  const std::string data = Pattern(kPart + 100, 5);
  auto file = NewFile("gap");
  ASSERT_NE(file, nullptr);
  // Part 2 and a tail, but no part 1.
  ASSERT_OK(file->PositionedWrite(data.data(), kPart, kPart));
  ASSERT_OK(file->PositionedWrite(data.data() + kPart, 100, 2 * kPart));
  Status s = file->Sync();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("no data at offset 0"), std::string::npos) << s.ToString();
  ASSERT_OK(file->Close());
  EXPECT_FALSE(Exists("gap"));
  EXPECT_EQ(UploadsLeft("gap"), 0u);

  // The tail's gap: part 1, then a tail one part too far.
  file = NewFile("gap2");
  ASSERT_OK(file->PositionedWrite(data.data(), kPart, 0));
  ASSERT_OK(file->PositionedWrite(data.data(), 100, 2 * kPart));
  s = file->Sync();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("no data at offset " + std::to_string(kPart)), std::string::npos)
      << s.ToString();
  ASSERT_OK(file->Close());

  // A short piece that does not end the object.
  file = NewFile("gap3");
  ASSERT_OK(file->PositionedWrite(data.data(), 100, 0));
  ASSERT_OK(file->PositionedWrite(data.data(), kPart, kPart));
  s = file->Sync();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("does not end the object"), std::string::npos) << s.ToString();
  ASSERT_OK(file->Close());
  EXPECT_FALSE(Exists("gap3"));
}

TEST_F(ObjectStoreEnvTest, AnAllocatedSizeNotWrittenIsDataLoss) {
  auto file = NewFile("alloc");
  ASSERT_NE(file, nullptr);
  ASSERT_OK(file->Allocate(100));
  ASSERT_OK(file->PositionedWrite(std::string(50, 'a').data(), 50, 0));
  const Status s = file->Sync();
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("50 bytes written, but 100 were allocated"), std::string::npos)
      << s.ToString();
  ASSERT_OK(file->Close());
  EXPECT_FALSE(Exists("alloc"));
}

TEST_F(ObjectStoreEnvTest, ReadsClampAtTheEndAndAMissingObjectIsNotFound) {
  const std::string data = Pattern(1000, 6);
  ASSERT_OK(s3_->PutObject("r/obj", data.data(), data.size()));
  auto file = env_->NewRandomAccessFile(Path("r/obj"), FileOptions{});
  ASSERT_OK(file);
  std::string buf(100, '\0');
  auto n = (*file)->Read(990, buf.size(), buf.data());
  ASSERT_OK(n);
  EXPECT_EQ(*n, 10u);
  EXPECT_EQ(buf.substr(0, 10), data.substr(990));
  n = (*file)->Read(500, 100, buf.data());
  ASSERT_OK(n);
  EXPECT_EQ(*n, 100u);
  EXPECT_EQ(buf, data.substr(500, 100));
  EXPECT_EQ(*(*file)->Read(1000, 10, buf.data()), 0u);
  EXPECT_EQ(*(*file)->Read(5000, 10, buf.data()), 0u);

  auto missing = env_->NewRandomAccessFile(Path("r/none"), FileOptions{});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("s3://ckpt/r/none"), std::string::npos)
      << missing.status().ToString();
}

TEST_F(ObjectStoreEnvTest, GetChildrenNamesFilesAndDirectoriesSorted) {
  for (const char* key : {"run/b", "run/a/x", "run/a/y", "run/c/d/e", "run2/z", "runner"}) {
    ASSERT_OK(s3_->PutObject(key, "x", 1)) << key;
  }
  const std::vector<std::string> want = {"a", "b", "c"};
  auto children = env_->GetChildren(Path("run"));
  ASSERT_OK(children);
  EXPECT_EQ(*children, want);
  EXPECT_EQ(*env_->GetChildren(Path("run/")), want);
  EXPECT_EQ(*env_->GetChildren(Path("run/c")), std::vector<std::string>{"d"});
  EXPECT_EQ(*env_->GetChildren("s3://ckpt"), (std::vector<std::string>{"run", "run2", "runner"}));
  auto empty = env_->GetChildren(Path("nothing"));
  ASSERT_OK(empty);
  EXPECT_TRUE(empty->empty());
}

TEST_F(ObjectStoreEnvTest, FileExistsAndIsDirectoryOnObjectsPrefixesAndMissingPaths) {
  ASSERT_OK(s3_->PutObject("d/sub/obj", "x", 1));
  EXPECT_TRUE(env_->FileExists(Path("d/sub/obj")));
  EXPECT_FALSE(env_->IsDirectory(Path("d/sub/obj")));
  EXPECT_TRUE(env_->FileExists(Path("d/sub")));
  EXPECT_TRUE(env_->IsDirectory(Path("d/sub")));
  EXPECT_TRUE(env_->IsDirectory(Path("d")));
  EXPECT_TRUE(env_->IsDirectory(Path("d/")));
  // A key prefix that is not a whole path component is not a directory.
  EXPECT_FALSE(env_->FileExists(Path("d/su")));
  EXPECT_FALSE(env_->IsDirectory(Path("d/su")));
  EXPECT_FALSE(env_->FileExists(Path("missing")));
  EXPECT_FALSE(env_->IsDirectory(Path("missing")));
  // Directories need no request, and exist while an object lies under them.
  ASSERT_OK(CreateDirWithParents(env_.get(), Path("made/a/b")));
  ASSERT_OK(env_->SyncDir(Path("made/a")));
  EXPECT_FALSE(env_->IsDirectory(Path("made/a/b")));
}

TEST_F(ObjectStoreEnvTest, RemoveFileRemovesAndAMissingOneIsNotFound) {
  ASSERT_OK(s3_->PutObject("rm/obj", "x", 1));
  ASSERT_OK(env_->RemoveFile(Path("rm/obj")));
  EXPECT_FALSE(Exists("rm/obj"));
  const Status again = env_->RemoveFile(Path("rm/obj"));
  EXPECT_EQ(again.code(), Code::kNotFound) << again.ToString();
  EXPECT_NE(again.message().find("s3://ckpt/rm/obj"), std::string::npos) << again.ToString();
  // RemoveRecursively, through IsDirectory, GetChildren and RemoveFile.
  for (const char* key : {"tree/a", "tree/b/c", "tree/b/d/e"})
    ASSERT_OK(s3_->PutObject(key, "x", 1));
  ASSERT_OK(RemoveRecursively(env_.get(), Path("tree")));
  EXPECT_TRUE(s3_->ListObjects("tree/")->empty());
}

TEST_F(ObjectStoreEnvTest, RenameMovesAnObjectButNotAPrefix) {
  const std::string data = Pattern(70000, 7);
  ASSERT_OK(s3_->PutObject("mv/from", data.data(), data.size()));
  ASSERT_OK(env_->RenameFile(Path("mv/from"), Path("mv/to")));
  EXPECT_FALSE(Exists("mv/from"));
  auto got = ReadFileToString(env_.get(), Path("mv/to"));
  ASSERT_OK(got);
  EXPECT_TRUE(*got == data);

  Status s = env_->RenameFile(Path("mv"), Path("moved"));
  EXPECT_EQ(s.code(), Code::kUnimplemented) << s.ToString();
  EXPECT_NE(s.message().find("directories are not renamed"), std::string::npos) << s.ToString();
  EXPECT_TRUE(Exists("mv/to"));

  s = env_->RenameFile(Path("mv/none"), Path("mv/x"));
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();

  TempDir local;
  s = env_->RenameFile(Path("mv/to"), local.Sub("to"));
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  s = env_->RenameFile(local.Sub("to"), Path("mv/to"));
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
}

TEST_F(ObjectStoreEnvTest, ASecondLockInThisProcessIsUnavailableUntilTheFirstGoes) {
  auto lock = env_->LockFile(Path("root/LOCK"), "host-a pid 1");
  ASSERT_OK(lock);
  EXPECT_EQ(*s3_->GetObject("root/LOCK"), "host-a pid 1");
  auto second = env_->LockFile(Path("root/LOCK"), "host-b pid 2");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable) << second.status().ToString();
  EXPECT_NE(second.status().message().find("s3://ckpt/root/LOCK"), std::string::npos)
      << second.status().ToString();
  EXPECT_OK(env_->LockFile(Path("other/LOCK"), "x"));  // another path: its own lock
  lock->reset();
  auto third = env_->LockFile(Path("root/LOCK"), "host-c pid 3");
  ASSERT_OK(third);
  EXPECT_EQ(*s3_->GetObject("root/LOCK"), "host-c pid 3");
}

TEST_F(ObjectStoreEnvTest, LocalPathsGoToTheWrappedEnv) {
  TempDir local;
  const std::string path = local.Sub("file");
  ASSERT_OK(WriteStringToFileSync(env_.get(), path, "local bytes"));
  EXPECT_EQ(ReadWholeFile(path), "local bytes");
  EXPECT_EQ(*ReadFileToString(env_.get(), path), "local bytes");
  EXPECT_TRUE(env_->FileExists(path));
  EXPECT_FALSE(env_->IsDirectory(path));
  ASSERT_OK(env_->CreateDir(local.Sub("dir")));
  EXPECT_TRUE(env_->IsDirectory(local.Sub("dir")));
  EXPECT_EQ(env_->CreateDir(local.Sub("dir")).code(), Code::kAlreadyExists);
  ASSERT_OK(env_->RenameFile(path, local.Sub("dir/moved")));
  EXPECT_EQ(*env_->GetChildren(local.Sub("dir")), std::vector<std::string>{"moved"});
  ASSERT_OK(env_->RemoveFile(local.Sub("dir/moved")));
  EXPECT_EQ(env_->RemoveFile(local.Sub("dir/moved")).code(), Code::kNotFound);
  EXPECT_TRUE(s3_->ListObjects("")->empty());  // nothing went to the store
}

TEST(ObjectStorePath, OnlyS3UrlsGoToTheStore) {
  EXPECT_TRUE(IsObjectStorePath("s3://bucket/key"));
  EXPECT_TRUE(IsObjectStorePath("s3://bucket"));
  EXPECT_FALSE(IsObjectStorePath("/tmp/s3://x"));
  EXPECT_FALSE(IsObjectStorePath("s3:/bucket"));
  EXPECT_FALSE(IsObjectStorePath("gs://bucket/key"));
}

}  // namespace
}  // namespace stint
