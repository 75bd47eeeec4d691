// The programs the stint-agent integration tests run (agent_test,
// agent_nodes_test, agent_elastic_test, tls_test), checked at compile time:
// stint_test's TOOLS define their paths, and a test built without one fails
// here, naming it, instead of at its first use.
#ifndef STINT_TESTS_UTIL_AGENT_TOOL_PATHS_H_
#define STINT_TESTS_UTIL_AGENT_TOOL_PATHS_H_

#ifndef STINTD_PATH
#error "STINTD_PATH must name the stintd binary"
#endif
#ifndef STINTCTL_PATH
#error "STINTCTL_PATH must name the stintctl binary"
#endif
#ifndef STINT_AGENT_PATH
#error "STINT_AGENT_PATH must name the stint-agent binary"
#endif

#endif  // STINT_TESTS_UTIL_AGENT_TOOL_PATHS_H_
