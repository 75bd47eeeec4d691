# The `stint` binary end to end. The executable target is stint_cli (the
# library owns the name stint); skipped when tools are not built.
if(TARGET stint_cli)
  stint_test(integration cli_test)
  target_compile_definitions(cli_test PRIVATE STINT_CLI_PATH="$<TARGET_FILE:stint_cli>")
  add_dependencies(cli_test stint_cli)
endif()
