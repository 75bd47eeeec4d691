# stintd's dashboard drawn by a real headless Chromium (skipped at run time
# when there is none), and stintctl's counts against /metrics; both against a
# real stintd on loopback, skipped when the tools are not built.
if(TARGET stintd)
  stint_test(integration dashboard_test)
  target_link_libraries(dashboard_test PRIVATE stint_stintdtest)
  target_compile_definitions(dashboard_test PRIVATE STINTD_PATH="$<TARGET_FILE:stintd>")
  add_dependencies(dashboard_test stintd)
  # zlib (optional) lets the test decode the screenshot and look at its pixels.
  find_package(ZLIB QUIET)
  if(ZLIB_FOUND)
    target_link_libraries(dashboard_test PRIVATE ZLIB::ZLIB)
    target_compile_definitions(dashboard_test PRIVATE STINT_HAVE_ZLIB)
  endif()
endif()
if(TARGET stintd AND TARGET stintctl)
  stint_test(integration stintctl_metrics_test)
  target_link_libraries(stintctl_metrics_test PRIVATE stint_stintdtest)
  target_compile_definitions(stintctl_metrics_test PRIVATE STINTD_PATH="$<TARGET_FILE:stintd>"
                                                           STINTCTL_PATH="$<TARGET_FILE:stintctl>")
  add_dependencies(stintctl_metrics_test stintd stintctl)
endif()
