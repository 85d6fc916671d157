package main

// Log values printed as text.
//
// slog's handlers print a value by its encoding.TextMarshaler, else (text handler) as
// the raw bytes of any byte-slice type, or (JSON handler) through encoding/json, which
// gives a byte slice as base64. net.HardwareAddr is a byte slice without MarshalText, so
// a MAC passed as itself printed as `gateway_mac_was="Z-\x11\x97\xc9\xc3"` (issue 20).
// Every call site converting with .String() is one forgotten call away from that again;
// the daemon's handlers therefore rewrite such values themselves (textAttr), so every
// log line shows a MAC as aa:bb:cc:dd:ee:ff whatever the call site passed.

import (
	"encoding"
	"fmt"
	"log/slog"
	"net"
	"reflect"
)

// textAttr is the daemon's slog.HandlerOptions.ReplaceAttr: a value whose type is a byte
// slice with a String method but no MarshalText (net.HardwareAddr, net.IPMask, any such
// type) is replaced by its String(); everything else is left as it is.
func textAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindAny {
		return a
	}
	v := a.Value.Any()
	switch v := v.(type) {
	case net.HardwareAddr:
		return slog.String(a.Key, v.String())
	case encoding.TextMarshaler, slog.LogValuer, error:
		return a
	case fmt.Stringer:
		if t := reflect.TypeOf(v); t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return slog.String(a.Key, v.String())
		}
	}
	return a
}
