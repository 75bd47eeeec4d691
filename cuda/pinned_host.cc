#include "pinned_host.h"

#include <cuda_runtime_api.h>
#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <fstream>
#include <string>

#include "cuda_status.h"

namespace stint {

int NumaNodeOfDevice(int device) {
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  std::string id(bus_id);
  for (auto& c : id) c = char(std::tolower(static_cast<unsigned char>(c)));
  std::ifstream in("/sys/bus/pci/devices/" + id + "/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node;
}

Status PreferNumaNode(void* data, size_t size, int node) {
  if (node < 0 || size == 0) return Status::OK();
  constexpr int kMaxNodes = 1024;
  if (node >= kMaxNodes - 1)
    return Status::InvalidArgument("NUMA node " + std::to_string(node) + " out of range");
  unsigned long mask[kMaxNodes / (8 * sizeof(unsigned long))] = {};
  mask[size_t(node) / (8 * sizeof(unsigned long))] |=
      1ul << (size_t(node) % (8 * sizeof(unsigned long)));
  // No libnuma dependency for one call.
  if (syscall(SYS_mbind, data, size, MPOL_PREFERRED, mask, kMaxNodes, 0) != 0) {
    return StatusFromErrno("mbind MPOL_PREFERRED node " + std::to_string(node), errno);
  }
  return Status::OK();
}

Result<std::unique_ptr<HostRegistration>> HostRegistration::Register(void* data, size_t size) {
  STINT_CUDA_RETURN_IF_ERROR(cudaHostRegister(data, size, cudaHostRegisterPortable));
  return std::unique_ptr<HostRegistration>(new HostRegistration(data, size));
}

HostRegistration::~HostRegistration() {
  if (cudaHostUnregister(data_) != cudaSuccess) cudaGetLastError();  // nothing to do about it here
}

Result<std::unique_ptr<PinnedHostBuffer>> PinnedHostBuffer::Allocate(size_t size, int numa_node) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  size = (size == 0 ? 1 : size + page - 1) / page * page;
  STINT_ASSIGN_OR_RETURN(MappedBuffer memory, MappedBuffer::Map(size));
  std::unique_ptr<PinnedHostBuffer> buf(new PinnedHostBuffer(std::move(memory)));
  // Placement is a speed-up, not a requirement.
  PreferNumaNode(buf->data(), size, numa_node).IgnoreError();
  STINT_ASSIGN_OR_RETURN(buf->registration_, HostRegistration::Register(buf->data(), size));
  return buf;
}

}  // namespace stint
