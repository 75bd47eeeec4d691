// stint._C.ResumableSampler and IndexPermutation: the runtime's data order.
// stint.ResumableSampler (python_bindings/stint/sampler.py) makes it a
// torch.utils.data.Sampler.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "status_to_exception.h"
#include "stint/resumable_sampler.h"

namespace stint {
namespace python {

namespace py = pybind11;

namespace {

std::tuple<uint64_t, uint64_t> CursorTuple(const DataCursor& c) { return {c.epoch, c.consumed}; }

}  // namespace

void BindSampler(py::module_& m) {
  py::class_<IndexPermutation>(m, "IndexPermutation",
                               "A bijection on [0, n), a pure function of (n, key): the "
                               "stateless shuffle behind ResumableSampler.")
      .def(py::init<uint64_t, uint64_t>(), py::arg("n"), py::arg("key"))
      .def_property_readonly("n", &IndexPermutation::n)
      .def(
          "__call__",
          [](const IndexPermutation& p, uint64_t pos) {
            if (pos >= p.n()) {
              ThrowStatus(Status::InvalidArgument("position " + std::to_string(pos) +
                                                  " is not below n = " + std::to_string(p.n())));
            }
            return p(pos);
          },
          py::arg("pos"))
      .def_property_readonly_static("VERSION",
                                    [](py::object) { return IndexPermutation::kVersion; });

  py::class_<ResumableSampler>(m, "ResumableSampler",
                               "Which samples each rank trains on, as a pure function of one "
                               "global cursor (epoch, consumed) that moves only in commit_step().")
      .def(py::init([](uint64_t dataset_size, uint64_t global_batch, uint64_t seed, bool shuffle,
                       bool drop_last) {
             SamplerConfig c;
             c.dataset_size = dataset_size;
             c.global_batch = global_batch;
             c.seed = seed;
             c.shuffle = shuffle;
             c.drop_last = drop_last;
             return ValueOrThrow(ResumableSampler::Create(c));
           }),
           py::arg("dataset_size"), py::arg("global_batch"), py::arg("seed") = 0,
           py::arg("shuffle") = true, py::arg("drop_last") = false)
      .def_property_readonly("dataset_size",
                             [](const ResumableSampler& s) { return s.config().dataset_size; })
      .def_property_readonly("global_batch",
                             [](const ResumableSampler& s) { return s.config().global_batch; })
      .def_property_readonly("seed", [](const ResumableSampler& s) { return s.config().seed; })
      .def_property_readonly("shuffle",
                             [](const ResumableSampler& s) { return s.config().shuffle; })
      .def_property_readonly("drop_last",
                             [](const ResumableSampler& s) { return s.config().drop_last; })
      .def_property_readonly(
          "cursor", [](const ResumableSampler& s) { return CursorTuple(s.cursor()); },
          "(epoch, consumed): the committed position.")
      .def_property_readonly("epoch_length", &ResumableSampler::epoch_length)
      .def_property_readonly("steps_per_epoch", &ResumableSampler::steps_per_epoch)
      .def_property_readonly("committed_steps", &ResumableSampler::committed_steps,
                             "Global number of the first step not yet committed.")
      .def_property_readonly("next_batch_size", &ResumableSampler::NextBatchSize)
      .def(
          "global_index",
          [](const ResumableSampler& s, uint64_t epoch, uint64_t pos) {
            if (pos >= s.config().dataset_size) {
              ThrowStatus(Status::InvalidArgument("position " + std::to_string(pos) +
                                                  " is not below the dataset size " +
                                                  std::to_string(s.config().dataset_size)));
            }
            return s.GlobalIndex(epoch, pos);
          },
          py::arg("epoch"), py::arg("pos"))
      .def(
          "cursor_at_step",
          [](const ResumableSampler& s, uint64_t step) {
            return CursorTuple(s.CursorAtStep(step));
          },
          py::arg("step"))
      .def(
          "rank_indices",
          [](const ResumableSampler& s, int rank, int world) {
            return ValueOrThrow(s.RankIndices(rank, world));
          },
          py::arg("rank") = 0, py::arg("world_size") = 1)
      .def(
          "rank_indices_at_step",
          [](const ResumableSampler& s, uint64_t step, int rank, int world) {
            return ValueOrThrow(s.RankIndicesAtStep(step, rank, world));
          },
          py::arg("step"), py::arg("rank") = 0, py::arg("world_size") = 1)
      .def(
          "worker_indices",
          [](const ResumableSampler& s, int rank, int world, int worker, int num_workers) {
            return ValueOrThrow(s.WorkerIndices(rank, world, worker, num_workers));
          },
          py::arg("rank"), py::arg("world_size"), py::arg("worker"), py::arg("num_workers"))
      .def("commit_step", &ResumableSampler::CommitStep,
           "Marks the batch at the cursor as trained on: call after the optimizer step.")
      .def("save_state", &ResumableSampler::SaveState,
           "Versioned JSON: cursor and data fingerprint.")
      .def(
          "load_state",
          [](ResumableSampler& s, const std::string& state) { ThrowIfError(s.LoadState(state)); },
          py::arg("state"),
          "Restores the cursor. FailedPreconditionError naming the field when the data "
          "configuration differs; DataLossError for bad JSON.")
      .def("fingerprint", &ResumableSampler::Fingerprint);
}

}  // namespace python
}  // namespace stint
