# stint-sim: trace adapters, the engine, the baselines and stint's policy under the virtual clock.
if(TARGET stint_sim_lib)
  stint_test(unit sim_trace_test)
  target_link_libraries(sim_trace_test PRIVATE stint_sim_lib)
  stint_test(unit sim_engine_test)
  target_link_libraries(sim_engine_test PRIVATE stint_sim_lib)
endif()
