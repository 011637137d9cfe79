// Package deploy holds no code: it is the home of Ferry's deployment files
// (systemd user units, the environment file, a three-node NATS JetStream
// cluster configuration) and of the test that checks them (deploy_test.go):
// the cluster configuration parses, forms a cluster that Ferry's bus client
// can use, and the units pass systemd-analyze verify where it exists.
package deploy
