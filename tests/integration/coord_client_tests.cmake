# CheckpointOptions::commit_guard with the real Checkpointer (no server).
stint_test(integration coord_client_commit_guard_test)
# The worker client, the session and stintctl against a real stintd on
# loopback; skipped when the tools are not built.
if(TARGET stintd AND TARGET stintctl AND TARGET stint_stintdtest)
  stint_test(integration coord_client_test)
  target_link_libraries(coord_client_test PRIVATE stint_stintdtest)
  target_compile_definitions(coord_client_test PRIVATE STINTD_PATH="$<TARGET_FILE:stintd>"
                                                       STINTCTL_PATH="$<TARGET_FILE:stintctl>")
  add_dependencies(coord_client_test stintd stintctl)
endif()
