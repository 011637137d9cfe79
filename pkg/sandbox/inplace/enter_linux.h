// Shared by enter_linux.c and the Go side (cgo).
#define FERRY_INPLACE "__ferry_sandbox_inplace__"
#define FERRY_INPLACE_JOIN "__ferry_sandbox_inplace_join__"
#define FERRY_INPLACE_FAILED "__ferry_sandbox_inplace_failed__"
#define FERRY_STEP_CREATE "create the user namespace"
#define FERRY_CHILD "__ferry_sandbox_child__"
#define FERRY_JOIN "join"
#define FERRY_STEP_JOIN "join the agent's namespace"
#define FERRY_STEP_CHECK "check the joined namespace"
