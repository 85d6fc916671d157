package openflow

// Group and meter mods in batches and bundles.
//
// Design history (issue 21). The desired-state store sends one change as one batch or
// one bundle, and a change may hold meters, groups and the flows that use them, in that
// order (OVS refuses a flow naming a group or meter it lacks). FlowModOp therefore also
// carries a group mod or a meter mod, encoded here, so Apply and ApplyBundle keep one
// order and one error report per message. Seen on OVS 3.1 (userspace datapath):
//
//   - Group mods inside an ONF EXT-230 bundle are accepted and applied in order: a group
//     added in the bundle may be named by a flow added after it in the same bundle; a flow
//     before its group is refused at commit (OFPBAC_BAD_OUT_GROUP, the bundle rolled back).
//     GroupAddOrModify works inside bundles too.
//   - Meter mods inside a bundle are refused at bundle-add time with
//     OFPET_EXPERIMENTER/ONF/OFPBFC_MSG_UNSUP (exp_code 2310; ops_test.go), so meters are
//     sent with Apply, before the bundle that adds their flows and after the one that
//     deletes them. In a plain batch a meter then a flow naming it is accepted.

// encodeOp returns the wire bytes of op with transaction id xid: its group mod, its meter
// mod, or else its flow mod. Errors: those of encodeGroupMod, encodeMeterMod and
// encodeFlowMod.
func encodeOp(op FlowModOp, xid uint32) ([]byte, error) {
	switch {
	case op.Group != nil:
		return encodeGroupMod(*op.Group, xid)
	case op.Meter != nil:
		return encodeMeterMod(*op.Meter, xid)
	default:
		return encodeFlowMod(op.Mod, xid)
	}
}
