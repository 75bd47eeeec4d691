# stintd end to end on loopback; skipped when tools are not built.
if(TARGET stintd)
  stint_test(integration stintd_test)
  target_link_libraries(stintd_test PRIVATE stint_stintdtest)
  target_compile_definitions(stintd_test PRIVATE STINTD_PATH="$<TARGET_FILE:stintd>")
  add_dependencies(stintd_test stintd)
endif()
# HttpApi in process (Stop before or racing Serve).
if(TARGET stintd_server)
  stint_test(integration http_api_stop_test)
  target_link_libraries(http_api_stop_test PRIVATE stintd_server)
endif()
