package controller

// The node's desired switch state: package switchstate's Store, with its errors folded
// into ErrOVSUnavailable where they say that the switch cannot be reached. The controller
// decides what each owner wants; switchstate sends it, replays it and audits it.

import (
	"context"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/switchstate"
)

// OwnerUpdate is one owner's part of a multi-owner change (switchstate.OwnerUpdate).
type OwnerUpdate = switchstate.OwnerUpdate

// Repair kinds, the values of Hooks.FlowRepair's kind (switchstate.Repair*).
const (
	// RepairMissing: a desired flow the switch lacked was installed again.
	RepairMissing = switchstate.RepairMissing
	// RepairUnexpected: a flow with this daemon run's cookie prefix that no owner wants
	// was deleted.
	RepairUnexpected = switchstate.RepairUnexpected
	// RepairMissingGroup: a desired group the switch lacked, or held with other buckets,
	// was set again.
	RepairMissingGroup = switchstate.RepairMissingGroup
	// RepairUnexpectedGroup: a group of ofsdn's id range that no owner wants was deleted.
	RepairUnexpectedGroup = switchstate.RepairUnexpectedGroup
	// RepairMissingMeter: a desired meter the switch lacked was added again.
	RepairMissingMeter = switchstate.RepairMissingMeter
	// RepairUnexpectedMeter: a meter of ofsdn's id range that no owner wants was deleted.
	RepairUnexpectedMeter = switchstate.RepairUnexpectedMeter
)

// flowStore is the node's switchstate.Store whose changes return errors that match
// ErrOVSUnavailable while the switch cannot be reached (ovsUnavailable).
type flowStore struct{ *switchstate.Store }

// SetOwner is switchstate.Store.SetOwner.
func (s flowStore) SetOwner(ctx context.Context, owner flows.Owner, fs []flows.Flow) error {
	return ovsUnavailable(s.Store.SetOwner(ctx, owner, fs))
}

// DeleteOwner is switchstate.Store.DeleteOwner.
func (s flowStore) DeleteOwner(ctx context.Context, owner flows.Owner) error {
	return ovsUnavailable(s.Store.DeleteOwner(ctx, owner))
}

// Update is switchstate.Store.Update.
func (s flowStore) Update(ctx context.Context, ups []OwnerUpdate) error {
	return ovsUnavailable(s.Store.Update(ctx, ups))
}

// Sync is switchstate.Store.Sync.
func (s flowStore) Sync(ctx context.Context, c switchstate.Conn, pre, post []openflow.FlowModOp) error {
	return ovsUnavailable(s.Store.Sync(ctx, c, pre, post))
}

// Rebuild is switchstate.Store.Rebuild.
func (s flowStore) Rebuild(ctx context.Context, owners map[flows.Owner][]flows.Flow) error {
	return ovsUnavailable(s.Store.Rebuild(ctx, owners))
}
