#include "base/mapped_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <string>
#include <utility>

namespace stint {

// MADV_DONTFORK so a fork (a DataLoader worker, a subprocess) does not turn
// every later write into a copy-on-write fault. No MADV_HUGEPAGE: with THP
// defrag on "madvise" the first snapshot then stalls in direct compaction
// (measured: 1.35 s instead of 0.47 s for a cold 1 GiB buffer).
Result<MappedBuffer> MappedBuffer::Map(size_t size, bool populate) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
  if (p == MAP_FAILED) return StatusFromErrno("mmap of " + std::to_string(size) + " bytes", errno);
  madvise(p, size, MADV_DONTFORK);  // advisory: a failure only costs speed after a fork
  return MappedBuffer(static_cast<char*>(p), size);
}

MappedBuffer::MappedBuffer(MappedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedBuffer& MappedBuffer::operator=(MappedBuffer&& other) noexcept {
  if (this != &other) {
    Unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedBuffer::~MappedBuffer() { Unmap(); }

void MappedBuffer::Leak() {
  data_ = nullptr;
  size_ = 0;
}

void MappedBuffer::Unmap() {
  if (data_ != nullptr) munmap(data_, size_);
}

}  // namespace stint
