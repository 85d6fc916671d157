package httpserve

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestServeThenShutdown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Start(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello")
	})}, l, slog.New(slog.DiscardHandler), "test server")
	resp, err := http.Get("http://" + l.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello" {
		t.Fatalf("body %q, want hello", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Shutdown")
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err after a clean shutdown: %v", err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if _, err := http.Get("http://" + l.Addr().String() + "/"); err == nil {
		t.Fatal("server still answers after Shutdown")
	}
}

func TestListenerFailureIsKept(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Start(&http.Server{Handler: http.NotFoundHandler()}, l, slog.New(slog.DiscardHandler), "test server")
	l.Close()
	<-s.Done()
	if s.Err() == nil {
		t.Fatal("Err is nil after the listener failed")
	}
}
