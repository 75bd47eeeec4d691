# Tiers 0 (memory) and 2 (replica directory) with real files, and the device
# path through the host double.
stint_test(integration tier_memory_test)
stint_test(integration tier_replica_test)
stint_test(unit device_snapshot_test)
