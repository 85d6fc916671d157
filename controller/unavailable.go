package controller

// Where the two ways of reaching Open vSwitch meet: OVSDB (package ovsdb) and OpenFlow
// (package openflow) each report their own outage; the node's callers only need to know
// that Open vSwitch cannot be reached right now.

import (
	"errors"

	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/ovsdb"
)

// ErrOVSUnavailable matches (errors.Is) every error the controller returns because Open
// vSwitch cannot be reached right now: the OpenFlow connection is down or being
// resynchronised after a reconnect (openflow.ErrDisconnected), or the OVSDB session is
// lost (ovsdb.ErrUnavailable). The condition is transient; a CNI handler maps it to CNI
// error 11 "try again later" (CNI spec 1.1, "Error" section: well-known codes).
var ErrOVSUnavailable = errors.New("Open vSwitch is unavailable: ovsdb-server or ovs-vswitchd is down or restarting; try again later")

// unavailableError is an error of package ovsdb or openflow that also matches
// ErrOVSUnavailable; its text is the original's.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == ErrOVSUnavailable }

// ovsUnavailable returns err so that it also matches ErrOVSUnavailable when it says that
// OVSDB (ovsdb.ErrUnavailable) or OpenFlow (openflow.ErrDisconnected) cannot be reached;
// any other error, and nil, are returned as they are. Every error the controller returns
// from OVSDB or OpenFlow passes through it.
func ovsUnavailable(err error) error {
	if err == nil || errors.Is(err, ErrOVSUnavailable) {
		return err
	}
	if errors.Is(err, ovsdb.ErrUnavailable) || errors.Is(err, openflow.ErrDisconnected) {
		return &unavailableError{err: err}
	}
	return err
}
