//go:build !linux

package rainstorm

import (
	"errors"
	"syscall"
)

var errNoLimits = errors.New("exec limits need Linux")

func (l ExecLimits) apply(int) error {
	if l == (ExecLimits{}) {
		return nil
	}
	return errNoLimits
}

// DetectCgroupParent: cgroups are Linux's.
func DetectCgroupParent() (string, error) { return "", errors.New("cgroups need Linux") }

// SweepCgroups: cgroups are Linux's.
func SweepCgroups(string) (int, error) { return 0, nil }

type cgroup struct{}

func newCgroup(string, ExecLimits) (*cgroup, error) { return nil, errors.New("cgroups need Linux") }
func (*cgroup) attach(*syscall.SysProcAttr)         {}
func (*cgroup) detach()                             {}
func (*cgroup) kill()                               {}
func (*cgroup) remove()                             {}
