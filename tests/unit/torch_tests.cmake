# The LibTorch adapter (runtime/torch); built only when LibTorch was found.
if(STINT_HAVE_TORCH)
  stint_test(unit torch_state_test)
  target_link_libraries(torch_state_test PRIVATE stint_torch)
endif()
if(STINT_HAVE_TORCH)
  stint_test(unit torch_data_sampler_test)
  target_link_libraries(torch_data_sampler_test PRIVATE stint_torch)
endif()
