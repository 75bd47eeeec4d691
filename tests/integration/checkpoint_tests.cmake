stint_test(integration checkpointer_test)
stint_test(integration fault_test)
