// Package configs holds no code: it is the home of the sample two-datacenter
// deployment (gates/, dc-east/, dc-west/: one YAML per role, with exactly
// the keys of gate.Config, manager.Config and worker.Config) and the hardened systemd units
// (systemd/). Its tests check the units with systemd-analyze when the tool
// is present (scripts/verify-units.sh) and their hardening directives
// always; cmd/gate, cmd/manager and cmd/worker load the sample YAML files with their
// real config loaders.
package configs
