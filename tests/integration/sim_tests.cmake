# stint-sim end to end on the small real samples in ../shared/traces (< 1 s).
if(TARGET stint-sim)
  stint_test(integration sim_cli_test)
  target_compile_definitions(sim_cli_test PRIVATE STINT_SIM_PATH="$<TARGET_FILE:stint-sim>"
    STINT_TRACES_DIR="${CMAKE_SOURCE_DIR}/../shared/traces")
  add_dependencies(sim_cli_test stint-sim)
endif()
