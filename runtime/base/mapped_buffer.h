// MappedBuffer: host memory straight from an anonymous private mmap, owned
// and unmapped on destruction. Page-aligned (what O_DIRECT and
// cudaHostRegister need) and exactly the size asked for, never a power-of-two
// bucket. The staging pool's buffers, load bounce buffers and pinned host
// buffers are all MappedBuffers.
//
// Thread-compatible. Move-only; a moved-from buffer is empty (null data).
#ifndef STINT_RUNTIME_BASE_MAPPED_BUFFER_H_
#define STINT_RUNTIME_BASE_MAPPED_BUFFER_H_

#include <cstddef>

#include "stint/status.h"

namespace stint {

class MappedBuffer {
 public:
  // Maps `size` bytes (REQUIRES: size > 0; the mapping covers whole pages),
  // zero-filled. `populate`: every page faulted in now, in one call, rather
  // than one fault at a time on first touch. On failure the error names the
  // size and errno.
  static Result<MappedBuffer> Map(size_t size, bool populate = false);

  MappedBuffer(MappedBuffer&& other) noexcept;
  MappedBuffer& operator=(MappedBuffer&& other) noexcept;
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;
  ~MappedBuffer();

  char* data() const { return data_; }
  size_t size() const { return size_; }

  // Gives the memory up without unmapping it: it stays mapped for the rest of
  // the process, for whoever may still touch it (a copy that timed out).
  void Leak();

 private:
  MappedBuffer(char* data, size_t size) : data_(data), size_(size) {}
  void Unmap();

  char* data_;
  size_t size_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_MAPPED_BUFFER_H_
