// io_uring engine: one ring, `queue_depth` requests in flight, reaped by the
// submitting thread. Short transfers and EINTR/EAGAIN are resubmitted for the
// remainder; a full ring blocks the submitter until a completion arrives.
#include <liburing.h>
#include <sys/uio.h>

#include <cerrno>
#include <mutex>
#include <vector>

#include "io/io_engine.h"

namespace stint {
namespace {

// The kernel caps one registered buffer at 1 GiB; bigger buffers are split.
constexpr size_t kMaxRegisteredPiece = size_t{1} << 30;
constexpr unsigned kRegisteredSlots = 64;

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(unsigned depth) : depth_(depth), slots_(depth) {
    for (unsigned i = 0; i < depth; ++i) free_slots_.push_back(depth - 1 - i);
  }
  ~UringEngine() override {
    Drain().IgnoreError();  // buffers may still be in the kernel's hands
    if (!initialized_) return;
    if (registered_) io_uring_unregister_buffers(&ring_);
    io_uring_queue_exit(&ring_);
  }
  UringEngine(const UringEngine&) = delete;
  UringEngine& operator=(const UringEngine&) = delete;

  Status Init() {
    int rc = io_uring_queue_init(depth_, &ring_, 0);
    if (rc < 0) return StatusFromErrno("io_uring_queue_init", -rc);
    initialized_ = true;
    // Sparse table so buffers can be registered one at a time as they appear.
    if (io_uring_register_buffers_sparse(&ring_, kRegisteredSlots) == 0) {
      registered_ = true;
      pieces_.resize(kRegisteredSlots);
    }
    return Status::OK();
  }

  const char* name() const override { return "io_uring"; }

  Status SubmitWrite(WritableFile* file, const void* buf, size_t len, uint64_t offset,
                     IoDone on_done) override {
    if (file->NativeFd() < 0) {
      Status s = file->PositionedWrite(buf, len, offset);
      Finish(s, s.ok() ? len : 0, on_done);
      return Status::OK();
    }
    return Queue(Request{true, file->NativeFd(), const_cast<void*>(buf), len, offset, 0,
                         file->path(), std::move(on_done)});
  }

  Status SubmitRead(const RandomAccessFile* file, void* buf, size_t len, uint64_t offset,
                    IoDone on_done) override {
    if (file->NativeFd() < 0) {
      auto r = file->Read(offset, len, buf);
      Finish(r.status(), r.ok() ? *r : 0, on_done);
      return Status::OK();
    }
    return Queue(
        Request{false, file->NativeFd(), buf, len, offset, 0, file->path(), std::move(on_done)});
  }

  Status Drain() override {
    while (in_flight_ > 0) {
      Status s = ReapOne();
      if (!s.ok()) return s;  // the ring itself failed: nothing more can be reaped
    }
    Status first = first_error_;
    first_error_ = Status::OK();
    return first;
  }

  void RegisterBuffer(void* base, size_t len) override {
    if (!registered_) return;
    std::lock_guard<std::mutex> lock(pieces_mu_);
    for (const Piece& pc : pieces_) {
      if (pc.owner == base) return;  // already registered
    }
    char* p = static_cast<char*>(base);
    std::vector<unsigned> taken;
    while (len > 0) {
      size_t piece = len < kMaxRegisteredPiece ? len : kMaxRegisteredPiece;
      unsigned slot = FindFreePiece();
      struct iovec iov = {p, piece};
      __u64 tag = 0;
      if (slot == kRegisteredSlots ||
          io_uring_register_buffers_update_tag(&ring_, slot, &iov, &tag, 1) < 0) {
        for (unsigned t : taken) ClearPiece(t);  // all or nothing: plain I/O then
        return;
      }
      pieces_[slot] = Piece{p, piece, base};
      taken.push_back(slot);
      p += piece;
      len -= piece;
    }
  }

  void UnregisterBuffer(void* base) override {
    if (!registered_) return;
    // The kernel serialises buffer updates with submissions (its ring lock);
    // pieces_mu_ does the same for our table.
    std::lock_guard<std::mutex> lock(pieces_mu_);
    for (unsigned i = 0; i < kRegisteredSlots; ++i) {
      if (pieces_[i].owner == base) ClearPiece(i);
    }
  }

  uint64_t fixed_bytes() const override { return fixed_bytes_; }

 private:
  struct Request {
    bool write;
    int fd;
    void* buf;
    size_t len;
    uint64_t offset;
    size_t done;  // bytes already transferred
    std::string path;
    IoDone on_done;
  };
  struct Piece {
    char* base = nullptr;
    size_t len = 0;
    void* owner = nullptr;  // the RegisterBuffer() argument this piece belongs to
  };

  unsigned FindFreePiece() const {
    for (unsigned i = 0; i < kRegisteredSlots; ++i) {
      if (pieces_[i].base == nullptr) return i;
    }
    return kRegisteredSlots;
  }
  void ClearPiece(unsigned slot) {
    struct iovec empty = {nullptr, 0};
    __u64 tag = 0;
    io_uring_register_buffers_update_tag(&ring_, slot, &empty, &tag, 1);
    pieces_[slot] = Piece{};
  }
  // Index of the registered piece holding [p, p+n), or -1.
  int FixedIndex(const void* p, size_t n) const {
    std::lock_guard<std::mutex> lock(pieces_mu_);
    const char* c = static_cast<const char*>(p);
    for (unsigned i = 0; i < pieces_.size(); ++i) {
      const Piece& pc = pieces_[i];
      if (pc.base != nullptr && c >= pc.base && c + n <= pc.base + pc.len) return int(i);
    }
    return -1;
  }

  void Finish(const Status& s, size_t bytes, const IoDone& on_done) {
    if (!s.ok() && first_error_.ok()) first_error_ = s;
    if (on_done) on_done(s, bytes);
  }

  Status Queue(Request req) {
    while (free_slots_.empty()) STINT_RETURN_IF_ERROR(ReapOne());  // backpressure
    unsigned slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot] = std::move(req);
    ++in_flight_;
    return Push(slot);
  }

  // Puts the remaining part of slot's request on the ring.
  Status Push(unsigned slot) {
    Request& r = slots_[slot];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {  // cannot happen: ring entries == slots, but be safe
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return Status::Internal("io_uring: no submission entry available");
    }
    char* p = static_cast<char*>(r.buf) + r.done;
    unsigned n = static_cast<unsigned>(r.len - r.done);
    uint64_t off = r.offset + r.done;
    int fixed = FixedIndex(p, n);
    if (r.write) {
      if (fixed >= 0)
        io_uring_prep_write_fixed(sqe, r.fd, p, n, off, fixed);
      else
        io_uring_prep_write(sqe, r.fd, p, n, off);
    } else {
      if (fixed >= 0)
        io_uring_prep_read_fixed(sqe, r.fd, p, n, off, fixed);
      else
        io_uring_prep_read(sqe, r.fd, p, n, off);
    }
    if (fixed >= 0) fixed_bytes_ += n;
    io_uring_sqe_set_data64(sqe, slot);
    int rc = io_uring_submit(&ring_);
    if (rc < 0) return StatusFromErrno("io_uring_submit", -rc);
    return Status::OK();
  }

  Status ReapOne() {
    io_uring_cqe* cqe = nullptr;
    int rc;
    do {
      rc = io_uring_wait_cqe(&ring_, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) return StatusFromErrno("io_uring_wait_cqe", -rc);
    unsigned slot = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
    int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);

    Request& r = slots_[slot];
    if (res == -EINTR || res == -EAGAIN) return Push(slot);
    Status s;
    bool complete = true;
    if (res < 0) {
      s = StatusFromErrno(std::string(r.write ? "io_uring write " : "io_uring read ") + r.path +
                              " at " + std::to_string(r.offset + r.done),
                          -res);
    } else if (res == 0 && r.write) {
      s = Status::IoError("io_uring write " + r.path + ": wrote 0 bytes");
    } else if (res > 0) {
      r.done += static_cast<size_t>(res);
      complete = r.done == r.len;  // short transfer: resubmit the rest
    }                              // res == 0 on a read: end of file, complete with what we have
    if (!complete) return Push(slot);
    IoDone done = std::move(r.on_done);
    size_t bytes = s.ok() ? r.done : 0;
    r = Request{};
    free_slots_.push_back(slot);
    --in_flight_;
    Finish(s, bytes, done);
    return Status::OK();
  }

  const unsigned depth_;
  io_uring ring_{};
  bool initialized_ = false;
  bool registered_ = false;
  mutable std::mutex pieces_mu_;
  std::vector<Piece> pieces_;  // guarded by pieces_mu_
  std::vector<Request> slots_;
  std::vector<unsigned> free_slots_;
  unsigned in_flight_ = 0;
  uint64_t fixed_bytes_ = 0;
  Status first_error_;
};

}  // namespace

Result<std::unique_ptr<IoEngine>> NewUringEngine(const IoEngineOptions& options) {
  auto engine = std::make_unique<UringEngine>(options.queue_depth == 0 ? 1 : options.queue_depth);
  STINT_RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<IoEngine>(std::move(engine));
}

}  // namespace stint
