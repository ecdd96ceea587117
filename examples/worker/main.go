// Command worker is a fenced writer in one page, the code to copy: it takes a
// Redis lease, which mints a fencing token, and writes through fenceproxy with
// that token. With -pause it stalls between the two, as a GC pause or SIGSTOP
// would, so another worker can take the expired lease meanwhile; fenceproxy
// then refuses this worker's late write as stale, and it exits 1.
//
//	go run ./examples/worker -name A -ttl 2s -pause 5s &
//	go run ./examples/worker -name B
//
// See docs/client.md for the whole walk-through.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/client/redislease"
)

type config struct {
	redisURL, lease, proxy, path, name string
	ttl, pause                         time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis that holds the lease")
	flag.StringVar(&c.lease, "lease", "orders/42", "name of the lease")
	flag.DurationVar(&c.ttl, "ttl", 10*time.Second, "lease time to live")
	flag.StringVar(&c.proxy, "proxy", "http://127.0.0.1:8080", "fenceproxy's base URL")
	flag.StringVar(&c.path, "path", "/orders/42", "path to PUT")
	flag.DurationVar(&c.pause, "pause", 0, "stall this long after acquiring, before writing (a GC pause, SIGSTOP)")
	flag.StringVar(&c.name, "name", "A", "this worker's name, in its output and in the body it writes")
	flag.Parse()

	logger := log.New(os.Stdout, c.name+": ", log.Ltime|log.Lmicroseconds|log.Lmsgprefix)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, c, logger)
	stop()
	if err != nil {
		if err != errRefused { // a refusal has been reported already
			logger.Print(err)
		}
		os.Exit(1)
	}
}

// errRefused is run's answer when fenceproxy refused the write as stale.
var errRefused = errors.New("write refused as stale")

func run(ctx context.Context, c config, logger *log.Logger) error {
	opts, err := redis.ParseURL(c.redisURL)
	if err != nil {
		return fmt.Errorf("-redis: %w", err)
	}
	opts.ContextTimeoutEnabled = true // calls give up when their context does
	rdb := redis.NewClient(opts)
	defer rdb.Close()

	// 1. Take the lease. The grant mints a token greater than every earlier
	// grant's.
	lease := redislease.New(rdb, c.lease, redislease.Options{TTL: c.ttl})
	logger.Printf("waiting for lease %q", c.lease)
	token, err := lease.AcquireWait(ctx, 100*time.Millisecond)
	if err != nil {
		return err
	}
	logger.Printf("acquired lease %q with token %d (ttl %v)", c.lease, token, c.ttl)
	defer func() {
		// A lost lease is ErrNotHeld here: Release never deletes the lease of
		// whoever holds it now.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		switch err := lease.Release(rctx); {
		case errors.Is(err, redislease.ErrNotHeld):
			logger.Printf("the lease had already expired; nothing to release")
		case err != nil:
			logger.Printf("release: %v", err)
		default:
			logger.Printf("released lease %q", c.lease)
		}
	}()

	// 2. The pause nobody can prevent: the lease expires meanwhile, and this
	// process cannot tell until it next asks Redis.
	if c.pause > 0 {
		logger.Printf("pausing %v (simulated GC pause; the lease expires meanwhile)", c.pause)
		select {
		case <-time.After(c.pause):
		case <-ctx.Done():
			return ctx.Err()
		}
		logger.Printf("resuming, still believing it holds token %d", token)
	}

	// 3. Write with the token. client.Transport sends it as the Fencing-Token
	// header and turns fenceproxy's refusals into errors.
	hc := &http.Client{Transport: &client.Transport{}, Timeout: 10 * time.Second}
	body := fmt.Sprintf("written by %s with token %d", c.name, token)
	req, err := http.NewRequestWithContext(client.WithToken(ctx, token),
		http.MethodPut, strings.TrimSuffix(c.proxy, "/")+c.path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	var pe *client.ProblemError
	switch {
	case errors.Is(err, client.ErrStaleToken) && errors.As(err, &pe):
		logger.Printf("REFUSED as stale: token %d is older than the high-water mark %d; a newer lease holder has written, so this worker stops",
			token, pe.HighWaterMark)
		return errRefused
	case err != nil:
		return fmt.Errorf("write failed: %w", err)
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("write failed: the upstream answered %s: %s", resp.Status, strings.TrimSpace(string(reply)))
	}
	logger.Printf("ACCEPTED with token %d: %s %s", token, resp.Status, strings.TrimSpace(string(reply)))
	return nil
}
