# stintd end to end on loopback; skipped when tools are not built.
if(TARGET stintd)
  stint_test(integration stintd_test)
  target_link_libraries(stintd_test PRIVATE stint_stintdtest)
  target_compile_definitions(stintd_test PRIVATE STINTD_PATH="$<TARGET_FILE:stintd>")
  add_dependencies(stintd_test stintd)
endif()
