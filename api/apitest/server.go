package apitest

import (
	"context"
	"testing"
	"time"

	"tempest/api"
	"tempest/workflow"
)

// Token is the bearer token of servers started by Serve.
const Token = "apitest-token-0123456789"

// Serve starts an api.Server for backend on a free loopback port, with the
// default workflow registry and Token, and shuts it down when the test ends.
// configure, if not nil, adjusts the config first.
func Serve(t testing.TB, backend api.Backend, configure func(*api.ServerConfig)) *api.Server {
	t.Helper()
	cfg := api.DefaultServerConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Token = Token
	cfg.Registry = workflow.DefaultRegistry()
	if configure != nil {
		configure(&cfg)
	}
	srv := api.NewServer(cfg, backend)
	if err := srv.Start(context.Background()); err != nil {
		t.Fatalf("start api server: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shut down api server: %v", err)
		}
	})
	return srv
}
