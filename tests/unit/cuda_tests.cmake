if(STINT_HAVE_CUDA)
  stint_test(unit cuda_probe_test)
  target_link_libraries(cuda_probe_test PRIVATE stint_cuda)
  stint_test(unit nccl_communicator_test)
  target_link_libraries(nccl_communicator_test PRIVATE stint_cuda)
  # The internal headers it tests (nccl_types.h, nccl_unique_id.h) include nccl.h.
  target_include_directories(nccl_communicator_test PRIVATE ${STINT_NCCL_INCLUDE_DIR})
endif()
# Pinned staging, copy streams, the lazy barrier and a Checkpointer round trip
# of device memory on a real GPU (skips with the driver's reason elsewhere).
if(STINT_HAVE_CUDA)
  stint_test(unit cuda_copier_test)
  target_link_libraries(cuda_copier_test PRIVATE stint_cuda)
endif()
