# The coordinator's scheduling policy (tools/stintd/core): pure, CPU only.
if(TARGET stintd_core)
  stint_test(unit policy_test)
  target_link_libraries(policy_test PRIVATE stintd_core)
endif()
