package openflow

// OFPT_ERROR decoding: type and code numbers into the names of the OpenFlow 1.3.5
// specification (§7.4.4, enum ofp_error_type and the per-type code enums), plus the ONF
// bundle extension's experimenter codes, so that an error message says
// "OFPET_BAD_MATCH/OFPBMC_BAD_PREREQ" rather than "type 4 code 9".

import (
	"encoding/binary"
	"fmt"

	"github.com/contiv/libOpenflow/openflow13"
)

// Error is one OFPT_ERROR message from the switch (ofp_error_msg, OpenFlow 1.3.5 §7.4.4;
// ofp_error_experimenter_msg when Type is OFPET_EXPERIMENTER, 0xffff).
type Error struct {
	// Xid is the transaction id of the request the error answers.
	Xid uint32
	// Type is the ofp_error_type (0..13, or 0xffff for experimenter errors).
	Type uint16
	// Code is the type's code; for experimenter errors, the exp_code.
	Code uint16
	// Experimenter is the experimenter id of an OFPET_EXPERIMENTER error (e.g. 0x4f4e4600
	// ONF, 0x00002320 Nicira), else 0.
	Experimenter uint32
	// Data is the error's data: usually the first 64 bytes or more of the failed request.
	Data []byte
}

// Error renders e as "OFPET_BAD_MATCH/OFPBMC_BAD_PREREQ (type 4, code 9)".
func (e *Error) Error() string {
	if e.Type == openflow13.ET_EXPERIMENTER {
		return fmt.Sprintf("%s (experimenter %#08x, exp_code %d)", ofErrorName(e.Type, e.Code, e.Experimenter), e.Experimenter, e.Code)
	}
	return fmt.Sprintf("%s (type %d, code %d)", ofErrorName(e.Type, e.Code, 0), e.Type, e.Code)
}

// Name returns the symbolic type/code, e.g. "OFPET_BAD_MATCH/OFPBMC_BAD_PREREQ".
func (e *Error) Name() string { return ofErrorName(e.Type, e.Code, e.Experimenter) }

// RequestError is an OFPT_ERROR matched to the request that caused it.
type RequestError struct {
	// Request describes the failed message: `flow mod "NAME"` for a FlowModOp, else e.g.
	// "barrier request", "bundle 3 commit request".
	Request string
	// Name is the FlowModOp.Name of the failed flow mod, empty for other requests.
	Name string
	// Err is the switch's error.
	Err *Error
}

// Error renders e as `switch rejected flow mod "NAME": OFPET_.../OFP... (type T, code C)`.
func (e *RequestError) Error() string {
	return fmt.Sprintf("switch rejected %s: %v", e.Request, e.Err)
}

// Unwrap returns the *Error, so errors.As finds it.
func (e *RequestError) Unwrap() error { return e.Err }

// decodeError decodes an OFPT_ERROR with libOpenflow's ErrorMsg/VendorError decoders, or
// by hand if they fail (they index without bounds checks).
func (s *Conn) decodeError(msg []byte) *Error {
	oe := &Error{Xid: binary.BigEndian.Uint32(msg[4:8])}
	m, err := safeParse(msg)
	switch v := m.(type) {
	case *openflow13.ErrorMsg:
		oe.Type, oe.Code, oe.Data = v.Type, v.Code, append([]byte(nil), v.Data.Bytes()...)
		return oe
	case *openflow13.VendorError:
		oe.Type, oe.Code, oe.Experimenter = v.Type, v.Code, v.ExperimenterID
		oe.Data = append([]byte(nil), v.Data.Bytes()...)
		return oe
	}
	if err != nil && s != nil {
		s.log.Debug("libOpenflow could not decode an OFPT_ERROR, decoding by hand", "err", err)
	}
	if len(msg) >= 12 {
		oe.Type = binary.BigEndian.Uint16(msg[8:10])
		oe.Code = binary.BigEndian.Uint16(msg[10:12])
		oe.Data = append([]byte(nil), msg[12:]...)
		if oe.Type == openflow13.ET_EXPERIMENTER && len(msg) >= 16 {
			oe.Experimenter = binary.BigEndian.Uint32(msg[12:16])
			oe.Data = append([]byte(nil), msg[16:]...)
		}
	}
	return oe
}

// ofErrorTypes maps ofp_error_type (§7.4.4) to its name and the prefix of its codes.
var ofErrorTypes = map[uint16]struct {
	name  string
	codes []string
}{
	0:  {"OFPET_HELLO_FAILED", []string{"OFPHFC_INCOMPATIBLE", "OFPHFC_EPERM"}},
	1:  {"OFPET_BAD_REQUEST", []string{"OFPBRC_BAD_VERSION", "OFPBRC_BAD_TYPE", "OFPBRC_BAD_MULTIPART", "OFPBRC_BAD_EXPERIMENTER", "OFPBRC_BAD_EXP_TYPE", "OFPBRC_EPERM", "OFPBRC_BAD_LEN", "OFPBRC_BUFFER_EMPTY", "OFPBRC_BUFFER_UNKNOWN", "OFPBRC_BAD_TABLE_ID", "OFPBRC_IS_SLAVE", "OFPBRC_BAD_PORT", "OFPBRC_BAD_PACKET", "OFPBRC_MULTIPART_BUFFER_OVERFLOW"}},
	2:  {"OFPET_BAD_ACTION", []string{"OFPBAC_BAD_TYPE", "OFPBAC_BAD_LEN", "OFPBAC_BAD_EXPERIMENTER", "OFPBAC_BAD_EXP_TYPE", "OFPBAC_BAD_OUT_PORT", "OFPBAC_BAD_ARGUMENT", "OFPBAC_EPERM", "OFPBAC_TOO_MANY", "OFPBAC_BAD_QUEUE", "OFPBAC_BAD_OUT_GROUP", "OFPBAC_MATCH_INCONSISTENT", "OFPBAC_UNSUPPORTED_ORDER", "OFPBAC_BAD_TAG", "OFPBAC_BAD_SET_TYPE", "OFPBAC_BAD_SET_LEN", "OFPBAC_BAD_SET_ARGUMENT"}},
	3:  {"OFPET_BAD_INSTRUCTION", []string{"OFPBIC_UNKNOWN_INST", "OFPBIC_UNSUP_INST", "OFPBIC_BAD_TABLE_ID", "OFPBIC_UNSUP_METADATA", "OFPBIC_UNSUP_METADATA_MASK", "OFPBIC_BAD_EXPERIMENTER", "OFPBIC_BAD_EXP_TYPE", "OFPBIC_BAD_LEN", "OFPBIC_EPERM"}},
	4:  {"OFPET_BAD_MATCH", []string{"OFPBMC_BAD_TYPE", "OFPBMC_BAD_LEN", "OFPBMC_BAD_TAG", "OFPBMC_BAD_DL_ADDR_MASK", "OFPBMC_BAD_NW_ADDR_MASK", "OFPBMC_BAD_WILDCARDS", "OFPBMC_BAD_FIELD", "OFPBMC_BAD_VALUE", "OFPBMC_BAD_MASK", "OFPBMC_BAD_PREREQ", "OFPBMC_DUP_FIELD", "OFPBMC_EPERM"}},
	5:  {"OFPET_FLOW_MOD_FAILED", []string{"OFPFMFC_UNKNOWN", "OFPFMFC_TABLE_FULL", "OFPFMFC_BAD_TABLE_ID", "OFPFMFC_OVERLAP", "OFPFMFC_EPERM", "OFPFMFC_BAD_TIMEOUT", "OFPFMFC_BAD_COMMAND", "OFPFMFC_BAD_FLAGS"}},
	6:  {"OFPET_GROUP_MOD_FAILED", []string{"OFPGMFC_GROUP_EXISTS", "OFPGMFC_INVALID_GROUP", "OFPGMFC_WEIGHT_UNSUPPORTED", "OFPGMFC_OUT_OF_GROUPS", "OFPGMFC_OUT_OF_BUCKETS", "OFPGMFC_CHAINING_UNSUPPORTED", "OFPGMFC_WATCH_UNSUPPORTED", "OFPGMFC_LOOP", "OFPGMFC_UNKNOWN_GROUP", "OFPGMFC_CHAINED_GROUP", "OFPGMFC_BAD_TYPE", "OFPGMFC_BAD_COMMAND", "OFPGMFC_BAD_BUCKET", "OFPGMFC_BAD_WATCH", "OFPGMFC_EPERM"}},
	7:  {"OFPET_PORT_MOD_FAILED", []string{"OFPPMFC_BAD_PORT", "OFPPMFC_BAD_HW_ADDR", "OFPPMFC_BAD_CONFIG", "OFPPMFC_BAD_ADVERTISE", "OFPPMFC_EPERM"}},
	8:  {"OFPET_TABLE_MOD_FAILED", []string{"OFPTMFC_BAD_TABLE", "OFPTMFC_BAD_CONFIG", "OFPTMFC_EPERM"}},
	9:  {"OFPET_QUEUE_OP_FAILED", []string{"OFPQOFC_BAD_PORT", "OFPQOFC_BAD_QUEUE", "OFPQOFC_EPERM"}},
	10: {"OFPET_SWITCH_CONFIG_FAILED", []string{"OFPSCFC_BAD_FLAGS", "OFPSCFC_BAD_LEN", "OFPSCFC_EPERM"}},
	11: {"OFPET_ROLE_REQUEST_FAILED", []string{"OFPRRFC_STALE", "OFPRRFC_UNSUP", "OFPRRFC_BAD_ROLE"}},
	12: {"OFPET_METER_MOD_FAILED", []string{"OFPMMFC_UNKNOWN", "OFPMMFC_METER_EXISTS", "OFPMMFC_INVALID_METER", "OFPMMFC_UNKNOWN_METER", "OFPMMFC_BAD_COMMAND", "OFPMMFC_BAD_FLAGS", "OFPMMFC_BAD_RATE", "OFPMMFC_BAD_BURST", "OFPMMFC_BAD_BAND", "OFPMMFC_BAD_BAND_VALUE", "OFPMMFC_OUT_OF_METERS", "OFPMMFC_OUT_OF_BANDS"}},
	13: {"OFPET_TABLE_FEATURES_FAILED", []string{"OFPTFFC_BAD_TABLE", "OFPTFFC_BAD_METADATA", "OFPTFFC_BAD_TYPE", "OFPTFFC_BAD_LEN", "OFPTFFC_BAD_ARGUMENT", "OFPTFFC_EPERM"}},
}

// onfBundleErrors names the ONF bundle extension's experimenter error codes 2300..2315
// (OpenFlow 1.4 OFPET_BUNDLE_FAILED codes, carried in OpenFlow 1.3 as experimenter errors).
var onfBundleErrors = []string{"OFPBFC_UNKNOWN", "OFPBFC_EPERM", "OFPBFC_BAD_ID", "OFPBFC_BUNDLE_EXIST", "OFPBFC_BUNDLE_CLOSED", "OFPBFC_OUT_OF_BUNDLES", "OFPBFC_BAD_TYPE", "OFPBFC_BAD_FLAGS", "OFPBFC_MSG_BAD_LEN", "OFPBFC_MSG_BAD_XID", "OFPBFC_MSG_UNSUP", "OFPBFC_MSG_CONFLICT", "OFPBFC_MSG_TOO_MANY", "OFPBFC_MSG_FAILED", "OFPBFC_TIMEOUT", "OFPBFC_BUNDLE_IN_PROGRESS"}

// ofErrorName returns "TYPE/CODE" in spec names, with numbers for unknown values.
func ofErrorName(typ, code uint16, experimenter uint32) string {
	if typ == openflow13.ET_EXPERIMENTER {
		switch {
		case experimenter == onfExperimenterID && code >= 2300 && int(code-2300) < len(onfBundleErrors):
			return "OFPET_EXPERIMENTER/ONF/" + onfBundleErrors[code-2300]
		case experimenter == onfExperimenterID:
			return fmt.Sprintf("OFPET_EXPERIMENTER/ONF/code_%d", code)
		case experimenter == openflow13.NxExperimenterID:
			return fmt.Sprintf("OFPET_EXPERIMENTER/NX/code_%d", code)
		}
		return fmt.Sprintf("OFPET_EXPERIMENTER/%#08x/code_%d", experimenter, code)
	}
	t, ok := ofErrorTypes[typ]
	if !ok {
		return fmt.Sprintf("OFPET_%d/code_%d", typ, code)
	}
	if int(code) < len(t.codes) {
		return t.name + "/" + t.codes[code]
	}
	return fmt.Sprintf("%s/code_%d", t.name, code)
}

// ofMsgTypes names ofp_type values (OpenFlow 1.3.5 §7.1).
var ofMsgTypes = []string{"OFPT_HELLO", "OFPT_ERROR", "OFPT_ECHO_REQUEST", "OFPT_ECHO_REPLY", "OFPT_EXPERIMENTER",
	"OFPT_FEATURES_REQUEST", "OFPT_FEATURES_REPLY", "OFPT_GET_CONFIG_REQUEST", "OFPT_GET_CONFIG_REPLY", "OFPT_SET_CONFIG",
	"OFPT_PACKET_IN", "OFPT_FLOW_REMOVED", "OFPT_PORT_STATUS", "OFPT_PACKET_OUT", "OFPT_FLOW_MOD", "OFPT_GROUP_MOD",
	"OFPT_PORT_MOD", "OFPT_TABLE_MOD", "OFPT_MULTIPART_REQUEST", "OFPT_MULTIPART_REPLY", "OFPT_BARRIER_REQUEST",
	"OFPT_BARRIER_REPLY", "OFPT_QUEUE_GET_CONFIG_REQUEST", "OFPT_QUEUE_GET_CONFIG_REPLY", "OFPT_ROLE_REQUEST",
	"OFPT_ROLE_REPLY", "OFPT_GET_ASYNC_REQUEST", "OFPT_GET_ASYNC_REPLY", "OFPT_SET_ASYNC", "OFPT_METER_MOD"}

// msgTypeName names an ofp_type value.
func msgTypeName(t uint8) string {
	if int(t) < len(ofMsgTypes) {
		return ofMsgTypes[t]
	}
	return fmt.Sprintf("OFPT_%d", t)
}
