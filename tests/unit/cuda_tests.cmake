if(STINT_HAVE_CUDA)
  stint_test(unit cuda_probe_test)
  target_link_libraries(cuda_probe_test PRIVATE stint_cuda)
endif()
