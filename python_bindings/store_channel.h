// A stint CommitChannel over a torch.distributed Store (the commit channel
// of a collective stint.Checkpointer).
#ifndef STINT_PYTHON_BINDINGS_STORE_CHANNEL_H_
#define STINT_PYTHON_BINDINGS_STORE_CHANNEL_H_

#include <pybind11/pybind11.h>

#include <memory>

#include "stint/commit_channel.h"

namespace stint {
namespace python {

// A CommitChannel over any Python object with the c10d Store methods set,
// get, check, delete_key and add (TCPStore, FileStore, PrefixStore, HashStore,
// the default group's store). Called from the persist thread: it takes the
// GIL for each call, and the Store's own methods release it while they wait.
// Reads go through the store's clone (its own connection), whose timeout
// GetBy() sets to what is left of the caller's deadline (a store without
// clone() is read directly, bounded by its own timeout). WaitFor() is the
// store's wait() on another clone (polled without one), GetMany() its
// multi_get().
// The store's type name is its Describe(). REQUIRES: the GIL held.
std::unique_ptr<CommitChannel> NewStoreChannel(pybind11::object store);

}  // namespace python
}  // namespace stint

#endif  // STINT_PYTHON_BINDINGS_STORE_CHANNEL_H_
