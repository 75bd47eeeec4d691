// Resuming a step's upload into an object store after the uploader died:
// every data file goes up with its manifest digest as S3 user metadata
// ("x-amz-meta-stint-digest"), and a later upload of the same step skips an
// object already there whole, instead of sending its bytes again.
//
// An object counts as uploaded when its size is the manifest's and either
// its digest metadata is the manifest's digest of the file or, where the
// metadata is missing (a server that does not keep it, e.g. `rclone serve
// s3` after a restart; a store reached through a wrapper of ObjectStoreEnv),
// every chunk stored in it reads back matching the manifest's checksums.
// Anything else (an old attempt's different bytes, a short object) is
// uploaded again. The step is still committed only by its manifest, written
// last (CommitInPlace), so a partial step never loads either way.
#ifndef STINT_RUNTIME_CHECKPOINT_UPLOAD_RESUME_H_
#define STINT_RUNTIME_CHECKPOINT_UPLOAD_RESUME_H_

#include <memory>
#include <string>

#include "format/manifest.h"
#include "stint/env.h"
#include "stint/status.h"

namespace stint {

// A WritableFile for `path`, the upload of the file `f` of a step: in an
// ObjectStoreEnv, an object stored with f's digest as metadata; elsewhere
// (a wrapper, a file system) env->NewWritableFile.
Result<std::unique_ptr<WritableFile>> NewUploadFile(Env* env, const std::string& path,
                                                    const FileRecord& f);

// Whether `dir`/f.name already holds the file `f` of manifest `m` whole (see
// above). false when there is no such object or it differs; an error only
// when the store could not be asked (naming the object).
Result<bool> AlreadyUploaded(Env* env, const std::string& dir, const Manifest& m,
                             const FileRecord& f);

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_UPLOAD_RESUME_H_
