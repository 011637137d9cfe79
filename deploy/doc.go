// Package deploy holds no code: it is the home of Ferry's deployment files
// (systemd user units, the environment file, a three-node NATS JetStream
// cluster configuration, a hardened system unit and a Kubernetes runner
// Job) and of the tests that check them: the cluster configuration parses,
// forms a cluster that Ferry's bus client can use, and the units pass
// systemd-analyze verify where it exists (deploy_test.go); the hardened unit
// scores as it should and its restrictions still let Ferry build bases and
// run agents, and the runner Job decodes strictly with the Kubernetes API
// types and keeps its security settings (hardened_test.go,
// kubernetes_test.go).
package deploy
