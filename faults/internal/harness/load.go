package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/faults/check"
)

// tokenSource is one resource's lease service: it hands out the newest
// token, now and then a new one (a new lease grant), and sometimes an older
// one (a holder that paused past its lease and resumes). Half the stale
// holders are a few grants behind; the other half hold the token that was
// newest some time ago (up to staleAge), so that a store which loses the
// last seconds of marks (a failover without acknowledgement) meets tokens
// from inside the lost window, whatever the request rate.
type tokenSource struct {
	mu     sync.Mutex
	newest uint64
	grants []grant // recent grants, oldest first
}

type grant struct {
	at  int64
	tok uint64
}

const (
	pNewLease = 0.15 // a new, higher token
	pStale    = 0.25 // an older one
	// staleDepth is how many grants behind a recent stale holder is.
	staleDepth = 8
	// staleAge bounds how long ago an old stale holder's lease was granted.
	staleAge = 4 * time.Second
)

func (s *tokenSource) pick(r *rand.Rand, now int64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := r.Float64()
	switch {
	case p < pNewLease:
		s.newest++
		s.grants = append(s.grants, grant{at: now, tok: s.newest})
		// Forget grants older than staleAge (amortised: trim when half
		// the slice is old).
		if old := now - int64(staleAge); len(s.grants) > 64 && s.grants[len(s.grants)/2].at < old {
			i := 0
			for i < len(s.grants) && s.grants[i].at < old {
				i++
			}
			s.grants = append(s.grants[:0], s.grants[i:]...)
		}
		return s.newest
	case p < pNewLease+pStale/2:
		k := 1 + r.Uint64N(staleDepth)
		if k >= s.newest {
			return 1
		}
		return s.newest - k
	case p < pNewLease+pStale:
		// The token that was newest age ago, or one below the newest if
		// there was no grant since.
		at := now - r.Int64N(int64(staleAge))
		tok := s.newest - 1
		for i := len(s.grants) - 1; i >= 0; i-- {
			if s.grants[i].at <= at {
				tok = min(tok, s.grants[i].tok)
				break
			}
		}
		return max(tok, 1)
	}
	return s.newest
}

// loadConfig shapes the client load of a scenario.
type loadConfig struct {
	Workers   int
	Resources int
	PGreater  float64 // share of requests on the ">" route
	// Bypass, a broken-path control: this share of the requests the proxy
	// refused as stale are sent again straight to the upstream, as a path
	// that skips the sidecar would. Zero in every real run.
	Bypass float64
	// GiveUp is the share of requests whose client gives up (GiveUpAfter)
	// before the upstream has finished working on them (GiveUpWork).
	GiveUp                  float64
	GiveUpAfter, GiveUpWork time.Duration
}

// load runs workers that send fenced writes through the replicas and record
// each operation.
type load struct {
	cfg      loadConfig
	clock    clock
	replicas []*Replica
	upstream string
	prefix   string // request id prefix
	sources  []*tokenSource

	// inflight holds, per worker, when its request in flight was sent
	// (0: none): settled waits on it.
	inflight []atomic.Int64
	// gaveUp counts the requests whose client gave up (GiveUp).
	gaveUp atomic.Int64
	// gaveUpIDs are their ids.
	gaveUpIDs sync.Map

	mu  sync.Mutex
	ops []check.Op
}

func newLoad(cfg loadConfig, c clock, replicas []*Replica, upstream, prefix string) *load {
	l := &load{cfg: cfg, clock: c, replicas: replicas, upstream: upstream, prefix: prefix,
		inflight: make([]atomic.Int64, cfg.Workers)}
	for range cfg.Resources {
		l.sources = append(l.sources, &tokenSource{newest: 1000})
	}
	return l
}

func resourceName(i int) string { return fmt.Sprintf("r%d", i) }

// run sends requests until ctx is done, then waits for those in flight (each
// bounded by the client timeout) so that every operation has an outcome.
func (l *load) run(ctx context.Context) {
	var wg sync.WaitGroup
	for w := range l.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.worker(ctx, w)
		}()
	}
	wg.Wait()
}

// errorBackoff is a worker's pause after a 503 or a failed request.
const errorBackoff = 20 * time.Millisecond

// clientTimeout bounds one request: longer than any pause a scenario
// injects, so that a paused replica's requests complete after SIGCONT, and
// than any FENCE_UPSTREAM_TIMEOUT the suite gives the proxies (at most
// 5 s), so that a request waiting at the drain barrier gets the proxy's
// answer rather than a client timeout.
const clientTimeout = 15 * time.Second

// newClient returns a client for one-off requests through the replicas
// (the token comes from the request's context: client.WithToken).
func newClient() *http.Client {
	return &http.Client{
		Transport: &client.Transport{Base: &http.Transport{DisableCompression: true}},
		Timeout:   clientTimeout,
	}
}

func (l *load) worker(ctx context.Context, w int) {
	r := rand.New(rand.NewPCG(uint64(w)+1, uint64(time.Now().UnixNano())))
	clients := make([]*http.Client, len(l.replicas))
	for i := range clients {
		clients[i] = &http.Client{
			Transport: &client.Transport{Base: &http.Transport{MaxIdleConnsPerHost: 2, DisableCompression: true}},
			Timeout:   clientTimeout,
		}
		defer clients[i].CloseIdleConnections()
	}
	direct := &http.Client{Timeout: clientTimeout}
	defer direct.CloseIdleConnections()
	// Worker 0 uses replica 0 only. The others pick a replica per request,
	// so while one replica is frozen they all end up waiting on it; without
	// a client that never does, whether the other replica kept serving
	// (expectOtherServes) would depend on those random picks.
	pick := func() int { return r.IntN(len(l.replicas)) }
	if w == 0 {
		pick = func() int { return 0 }
	}
	for seq := 0; ctx.Err() == nil; seq++ {
		res := r.IntN(len(l.sources))
		op := check.Op{
			ID:       fmt.Sprintf("%s-%d-%d", l.prefix, w, seq),
			Client:   w,
			Replica:  pick(),
			Resource: resourceName(res),
			Token:    l.sources[res].pick(r, l.clock.now()),
			Greater:  r.Float64() < l.cfg.PGreater,
		}
		l.inflight[w].Store(max(l.clock.now(), 1))
		if l.cfg.GiveUp > 0 && r.Float64() < l.cfg.GiveUp {
			l.gaveUpIDs.Store(op.ID, true)
			l.doWith(clients[op.Replica], &op, reqOpts{work: l.cfg.GiveUpWork, giveUp: l.cfg.GiveUpAfter})
			if op.Outcome == check.Failed && op.Status == 0 {
				l.gaveUp.Add(1)
			}
		} else {
			l.do(clients[op.Replica], &op)
		}
		// Each operation joins the history as it completes, so that a
		// scenario can read what was admitted while the load runs.
		l.mu.Lock()
		l.ops = append(l.ops, op)
		l.mu.Unlock()
		l.inflight[w].Store(0)
		if op.Outcome == check.Stale && l.cfg.Bypass > 0 && r.Float64() < l.cfg.Bypass {
			l.bypass(direct, &op)
		}
		if op.Outcome == check.Unavailable || op.Outcome == check.Failed {
			// A client backs off after a refusal it cannot act on; without
			// it a dead store turns the load into a flood of instant 503s.
			time.Sleep(errorBackoff)
		}
	}
}

func routePath(op *check.Op) string {
	if strings.HasPrefix(op.Resource, seqResourcePrefix) {
		return "/sq/" + op.Resource
	}
	if op.Greater {
		return "/gt/" + op.Resource
	}
	return "/ge/" + op.Resource
}

// do sends op through hc (which carries op's token in the Fencing-Token
// header via client.Transport) and records its outcome. The request has its
// own context: the end of the load does not cut requests short.
func (l *load) do(hc *http.Client, op *check.Op) {
	l.doWith(hc, op, reqOpts{})
}

// reqOpts shape one request beyond its op.
type reqOpts struct {
	// work, when set, is how long the upstream works on the request
	// (workHeader), whatever happens to the connection meanwhile.
	work time.Duration
	// giveUp, when set, is when the client gives up on the request and
	// closes its connection (a client timeout shorter than the work).
	giveUp time.Duration
}

// doWith is do with the upstream's work time and the client's own timeout.
func (l *load) doWith(hc *http.Client, op *check.Op, o reqOpts) {
	ctx := client.WithToken(context.Background(), op.Token)
	if op.HasSeq {
		ctx = client.WithSequenceNumber(ctx, op.Seq)
	}
	if o.giveUp > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.giveUp)
		defer cancel()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.replicas[op.Replica].URL()+routePath(op), strings.NewReader("w"))
	req.Header.Set(RequestIDHeader, op.ID)
	if o.work > 0 {
		req.Header.Set(workHeader, o.work.String())
	}
	op.Call = l.clock.now()
	// When the request left, on the history's clock: the slow upstream
	// holds nothing past the proxy's deadline for it.
	req.Header.Set(sentAtHeader, strconv.FormatInt(op.Call, 10))
	resp, err := hc.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	op.Return = l.clock.now()
	setOutcome(op, resp, err)
}

// setOutcome records what the answer (or the error) of op's request says.
// A problem answer is a *client.ProblemError in err (client.Transport and
// client.CheckResponse turn it into one).
func setOutcome(op *check.Op, resp *http.Response, err error) {
	var pe *client.ProblemError
	switch {
	case err == nil:
		op.Status = resp.StatusCode
		switch {
		case resp.StatusCode/100 == 2, resp.StatusCode == 502, resp.StatusCode == 504:
			// 502/504: admitted, then the upstream did not answer.
			op.Outcome, op.Mark = check.Admitted, op.Token
		default:
			op.Outcome = check.Failed
		}
	case errors.As(err, &pe):
		op.Status, op.Problem = pe.Status, pe.Type
		switch {
		case pe.Status == 409 && pe.HasMark:
			op.Outcome, op.Mark = check.Stale, pe.HighWaterMark
			op.MarkSeq, op.MarkHasSeq = pe.HighWaterSequence, pe.HasHighWaterSequence
		case pe.Status == 503:
			op.Outcome = check.Unavailable
		default:
			op.Outcome = check.Failed
		}
	default:
		op.Outcome = check.Failed // connection error or client timeout: unknown
	}
}

// bypass sends a refused request straight to the upstream (the negative
// control "bypass").
func (l *load) bypass(hc *http.Client, op *check.Op) {
	req, _ := http.NewRequest(http.MethodPost, l.upstream+routePath(op), strings.NewReader("w"))
	req.Header.Set(RequestIDHeader, op.ID)
	req.Header.Set(client.DefaultHeader, fmt.Sprint(op.Token))
	if resp, err := hc.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

// settled waits until no request sent before t is still in flight (each
// is in the history), for up to timeout.
func (l *load) settled(ctx context.Context, t int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		busy := 0
		for i := range l.inflight {
			if c := l.inflight[i].Load(); c != 0 && c <= t {
				busy++
			}
		}
		if busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d requests sent before the fault still in flight after %v", busy, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (l *load) history() []check.Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]check.Op(nil), l.ops...)
}
