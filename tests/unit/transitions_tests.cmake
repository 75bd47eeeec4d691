# The coordinator's pure state transitions.
if(TARGET stintd_core)
  stint_test(unit transitions_test)
  target_link_libraries(transitions_test PRIVATE stintd_core)
endif()

# Rendezvous rounds of elastic groups.
if(TARGET stintd_core)
  stint_test(unit rendezvous_test)
  target_link_libraries(rendezvous_test PRIVATE stintd_core)
endif()
