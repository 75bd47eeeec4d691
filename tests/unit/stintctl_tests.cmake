# stintctl's parsing, formatting and table views; built with the tools.
if(TARGET stintctl_lib)
  stint_test(unit stintctl_format_test)
  target_link_libraries(stintctl_format_test PRIVATE stintctl_lib)
endif()
