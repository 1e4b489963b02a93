// Package compose holds the fleet deployment: a 3-node NATS JetStream cluster
// and Docker-host workers (docker-compose.yml, nats.conf, the image and
// start scripts). Its tests prove the NATS permissions of nats.conf against a
// real in-process server (security_test.go) and run the fleet end to end from
// the locally built images (e2e_test.go).
package compose
