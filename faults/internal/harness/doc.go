// Package harness runs the fault and load scenarios: real redis-server,
// sentinel and fenceproxy processes on 127.0.0.1 (each in its own process
// group, signalled only by the PID it was started with, killed with the
// harness), an in-process upstream that records what it receives, toxiproxy
// as a library between the proxies and Redis, and concurrent clients that
// record every operation for package check. See docs/faults.md.
package harness
