package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

var _ fencestore.Store = (*Store)(nil)

// DefaultWaitTimeout is the WAIT bound when Options.WaitTimeout is zero, as
// FENCE_REDIS_WAIT_TIMEOUT's default.
const DefaultWaitTimeout = 100 * time.Millisecond

// Options configures New. The zero value is usable.
type Options struct {
	// KeyPrefix is put before each resource name to form its key.
	KeyPrefix string
	// MinReplicas, when above zero, makes every admission wait (WAIT) until
	// that many replicas have acknowledged the mark; fewer within WaitTimeout
	// is an error wrapping fencestore.ErrUnavailable and a *ReplicaAckError.
	MinReplicas int
	// WaitTimeout bounds that wait, rounded up to whole milliseconds. Zero
	// means DefaultWaitTimeout. Redis notices the timeout on its event loop,
	// so a wait can run over by up to 1/hz (100ms at the default hz 10); the
	// caller's ctx bounds it regardless.
	WaitTimeout time.Duration
	// Logger receives warnings about the client's options. If nil, nothing is
	// logged.
	Logger *zap.Logger
	// MaxBatch bounds how many admissions one pipeline carries (group
	// commit, see batch.go). Zero means DefaultMaxBatch; a negative value
	// turns batching off (one round trip per admission). Admissions with
	// MinReplicas are not batched.
	MaxBatch int
	// Pipelines is how many batches may be in flight at once. Zero means
	// DefaultPipelines.
	Pipelines int
	// ReleaseLinger is how long a release of the drain barrier waits for
	// an admission to ride when none is queued (batch.go). Zero means
	// DefaultReleaseLinger; a negative value sends it at once.
	ReleaseLinger time.Duration
	// DrainPoll is how often a Drain that no announcement woke looks at
	// the entries it waits for (drain.go). Zero means DefaultDrainPoll.
	DrainPoll time.Duration
	// OnRoundTrip, if set, learns of every round trip that carries
	// admissions or releases (for metrics); it must not block.
	OnRoundTrip func(fencestore.RoundTrip)
}

// Store is a fencestore.Store in Redis.
type Store struct {
	client      redis.UniversalClient
	prefix      string
	minReplicas int
	waitTimeout time.Duration
	log         *zap.Logger
	batch       *batcher // nil: one round trip per admission
	// onRoundTrip is Options.OnRoundTrip (nil: none).
	onRoundTrip func(fencestore.RoundTrip)

	// The identity (keeper.go): expect is the record Expect named (nil
	// before). On a Cluster whose prefix has no hash tag, records names
	// the record of every slot (slots.go), or recordsErr says why it
	// cannot; spellable says a mark key could be a record's name.
	expect atomic.Pointer[string]
	// gens is the greatest generation seen per slot (one part off a
	// Cluster): generation.go.
	gens       *fencestore.Generations
	records    *slotRecords
	recordsErr error
	spellable  bool

	// The drain barrier (flight.go, drain.go, release.go). channel carries
	// the releases Drains wait for; entry ids are idPrefix and a count;
	// flights are this store's registrations until their Release.
	channel   string
	pend      *pendingReleases
	idPrefix  string
	ids       atomic.Uint64
	drainPoll time.Duration
	flights   flights
	// wmu guards the subscriber's side: watchers (the Drains waiting for
	// each member), the members announced lately (announced, in
	// announceLog's order), and the subscription's epoch (0 before it
	// holds, one more each time it holds again) with epochCh, closed and
	// replaced at each new epoch.
	wmu         sync.Mutex
	watchers    map[string][]*waiter
	announced   map[string]bool
	announceLog []string
	epoch       uint64
	epochCh     chan struct{}
	// The subscription to channel, made on the first admission with a
	// barrier; listening is closed once it holds (or once listen stopped
	// waiting for it).
	listenOnce    sync.Once
	listeningOnce sync.Once
	listening     chan struct{}
	listenTimer   *time.Timer
	// mu guards closed, pubsub and bg.Add: Close waits for bg (the
	// subscription, releases on goroutines of their own) once nothing can
	// add to it.
	mu     sync.Mutex
	closed bool
	pubsub *redis.PubSub
	bg     sync.WaitGroup
	done   chan struct{} // closed by Close: Drains stop waiting

	closeOnce sync.Once
	closeErr  error
}

// New returns a store that keeps its marks through client, and takes
// ownership of client: Close closes it. See the package doc for the client
// options the store needs.
func New(client redis.UniversalClient, opts Options) *Store {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	wait := opts.WaitTimeout
	if wait <= 0 {
		wait = DefaultWaitTimeout
	}
	// WAIT takes milliseconds, and "WAIT n 0" blocks for ever: never let a
	// sub-millisecond timeout round down to 0.
	wait = (wait + time.Millisecond - 1).Truncate(time.Millisecond)
	poll := opts.DrainPoll
	if poll <= 0 {
		poll = DefaultDrainPoll
	}
	s := &Store{
		client:      client,
		prefix:      opts.KeyPrefix,
		minReplicas: opts.MinReplicas,
		waitTimeout: wait,
		log:         log.Named("redisstore"),
		channel:     opts.KeyPrefix + "inflight",
		pend:        &pendingReleases{max: maxPendingReleases},
		idPrefix:    newFlightIDs(),
		drainPoll:   poll,
		listening:   make(chan struct{}),
		epochCh:     make(chan struct{}),
		done:        make(chan struct{}),
	}
	if _, cluster := client.(*redis.ClusterClient); cluster && !hasHashTag(s.prefix) {
		s.records, s.recordsErr = newSlotRecords(s.prefix)
		s.spellable = recordSpellable(s.prefix)
	}
	s.gens = fencestore.NewGenerations(1)
	if s.records != nil {
		s.gens = fencestore.NewGenerations(clusterSlots)
	}
	s.checkClient()
	if opts.MaxBatch >= 0 && opts.MinReplicas <= 0 {
		maxBatch, pipelines := opts.MaxBatch, opts.Pipelines
		if maxBatch == 0 {
			maxBatch = DefaultMaxBatch
		}
		if pipelines <= 0 {
			pipelines = DefaultPipelines
		}
		s.pend.max = max(maxPendingReleases, 4*maxBatch*pipelines)
		s.batch = newBatcher(client, maxBatch, pipelines, s.pend, s.channel, s.log)
		s.batch.observe = opts.OnRoundTrip
		s.batch.linger = opts.ReleaseLinger
		if s.batch.linger == 0 {
			s.batch.linger = DefaultReleaseLinger
		}
		// A release sent again is late already: it does not linger.
		s.pend.retry = s.batch.releasedNow
	}
	s.onRoundTrip = opts.OnRoundTrip
	return s
}

// Layout reports a key prefix the store cannot lay its keys out with, nil
// when it can: on a Cluster, a prefix with a '}' outside a hash tag cannot
// name the per-slot identity records (slots.go).
func (s *Store) Layout() error { return s.recordsErr }

// checkClient warns about client options that break the package's promises;
// it cannot refuse them, since New has no error to return.
func (s *Store) checkClient() {
	var ctxTimeout bool
	var retries int
	switch c := s.client.(type) {
	case *redis.Client:
		ctxTimeout, retries = c.Options().ContextTimeoutEnabled, c.Options().MaxRetries
	case *redis.ClusterClient:
		ctxTimeout, retries = c.Options().ContextTimeoutEnabled, c.Options().MaxRetries
	case *redis.Ring:
		ctxTimeout, retries = c.Options().ContextTimeoutEnabled, c.Options().MaxRetries
	default:
		return
	}
	if !ctxTimeout {
		s.log.Warn("redis client has ContextTimeoutEnabled=false: an admission can outlive the store timeout by the client's read timeout")
	}
	if retries > 0 {
		s.log.Warn("redis client retries commands: a retried '>' admission whose reply was lost is refused by its own mark; set MaxRetries to -1",
			zap.Int("max_retries", retries))
	}
}

// Admit runs the admission script on a's key, which decides as a.Decide
// does over the mark stored there ("token" or "token:sequence", see
// fencestore.ParseMarkValue). With MinReplicas it then
// waits for the replicas on the same connection, and reports a decision that
// too few of them acknowledged as an error: not an admission, and not a
// refusal either, since a refusal reports the mark, and a mark the replicas do
// not have (written by an admission whose own WAIT failed) can be lost in a
// failover after a client was told of it.
//
// A floor (a.HasFloor) heals a regressed mark in the same script run (see
// doc.go). Once Expect named an identity record, the same run checks it
// (on a Cluster, the record in the mark's slot: slots.go), and an
// admission that finds it gone or changed fails with the
// *fencestore.LostError itself, having written nothing.
func (s *Store) Admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	if err := ctx.Err(); err != nil {
		return fencestore.Decision{}, fencestore.Unavailable(err)
	}
	// A release of this admission's entry is moot once its bound and the
	// margin have passed since now (release.go).
	start := time.Now()
	key, err := s.markKey("admit", a.Resource)
	if err != nil {
		return fencestore.Decision{}, fencestore.Unavailable(err)
	}
	fkey, sameSlot := flightKey(key)
	fl := s.barrierArg(a)
	switch {
	case fl == "":
		// The script does not touch the in-flight key, but a Cluster
		// still refuses keys of two slots (CROSSSLOT): the mark key
		// again stands in for it.
		fkey = key
	case !sameSlot && s.sharded():
		// The script would touch keys of two slots: Cluster refuses it,
		// and a Ring may send it where one of them is not.
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("redisstore: admit %q: %w", key, errNoFlightSlot))
	default:
		// Announcements reach a waiter from the subscription that was up
		// when its admission was sent (drain.go).
		s.startListening()
	}
	moot := start.Add(time.Duration(flightMillis(a))*time.Millisecond + fencestore.AbandonMargin)
	epoch, _ := s.epochNow()
	c := call{keys: [2]string{key, fkey}, tok: strconv.FormatUint(a.Token, 10), mode: "ge", fl: fl}
	if a.Compare == fencestore.Greater {
		c.mode = "gt"
	}
	if a.HasSequence {
		c.seq = strconv.FormatUint(a.Sequence, 10) // else "", the script's "no sequence"
	}
	if a.HasFloor {
		c.floor = floorArg(a)
	}
	if want := s.expect.Load(); want != nil && *want != "" {
		idKey, err := s.recordFor(key)
		if err != nil {
			return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("redisstore: admit %q: %w", key, err))
		}
		c.id = [2]string{idKey, *want}
		if c.gen, c.part = s.generationFor(key); c.gen != "" {
			c.seen = s.gens.Seen(c.part)
		}
	}
	var (
		reply any
		wait  *redis.IntCmd
	)
	switch {
	case s.batch != nil && s.minReplicas <= 0:
		reply, err = s.batch.admit(ctx, c) // the batch reports its round trip
	default:
		start := time.Now() // of the round trip
		if s.minReplicas > 0 {
			reply, wait, err = s.admitAndWait(ctx, c)
		} else {
			reply, err = s.run(ctx, c)
		}
		if s.onRoundTrip != nil {
			s.onRoundTrip(fencestore.RoundTrip{Admissions: 1, Duration: time.Since(start), Failed: err != nil})
		}
	}
	if err != nil {
		s.refreshSlots()
		if role := roleError(err); role != nil {
			// Redis refused the script before it ran: nothing to abandon.
			return fencestore.Decision{}, role
		}
		if ctx.Err() != nil || mayHaveRun(err) {
			s.abandon(a, fkey, fl, moot)
		}
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("redisstore: admit %q: %w", key, err))
	}
	d, snap, err := parseReply(reply, a, fkey, c.id[1])
	if lost, ok := err.(*fencestore.LostError); ok {
		// The script wrote nothing, and entered nothing in flight.
		if lost.Rollback {
			lost.Seen = max(lost.Seen, c.seen)
		}
		return fencestore.Decision{}, lost
	}
	if err != nil {
		s.abandon(a, fkey, fl, moot)
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("redisstore: admit %q: %w", key, err))
	}
	if c.gen != "" {
		s.gens.See(c.part, d.Generation)
	}
	if d.Flight.Registered() {
		s.flights.put(d.Flight.Ref, &flight{key: fkey, moot: moot, olders: snap.olders, more: snap.more, admitted: time.Now(), epoch: epoch})
	}
	if wait == nil {
		return d, nil
	}
	// A decision WAIT does not stand behind is an error: its entry, if it
	// made one, holds nobody back any longer.
	acked, err := wait.Result()
	if err != nil {
		s.Release(d.Flight)
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("redisstore: admit %q: WAIT: %w", key, err))
	}
	if acked < int64(s.minReplicas) {
		s.Release(d.Flight)
		return fencestore.Decision{}, fencestore.Unavailable(&ReplicaAckError{
			Key: key, Acked: int(acked), Want: s.minReplicas, Timeout: s.waitTimeout,
		})
	}
	return d, nil
}

// call is one admission as admit.lua takes it: its mark key and in-flight
// key, its token, mode ("ge", "gt"), sequence, barrier and floor arguments
// ("" for none), and the identity key and the identity the script expects
// there (both "" for no check); with the identity, the generation key of
// the mark's slot (gen, "" for none), its part of Store.gens, and the
// greatest generation seen there.
type call struct {
	keys                      [2]string
	tok, mode, seq, fl, floor string
	id                        [2]string
	gen                       string
	part                      int
	seen                      uint64
}

// script returns the keys and arguments of one run of admit.lua for cs,
// which share their identity check and generation key (cs[0]'s), with "w"
// when w. The generation passed is the greatest any of them has seen.
func script[T interface{ callOf() *call }](cs []T, w bool) ([]string, []any) {
	keys := make([]string, 0, 2*len(cs)+2)
	args := make([]any, 0, 5*len(cs)+3)
	var seen uint64
	for _, x := range cs {
		c := x.callOf()
		keys = append(keys, c.keys[0], c.keys[1])
		args = append(args, c.tok, c.mode, c.seq, c.fl, c.floor)
		seen = max(seen, c.seen)
	}
	if w {
		args = append(args, "w")
	}
	if len(cs) > 0 {
		if c := cs[0].callOf(); c.id[1] != "" {
			keys, args = append(keys, c.id[0]), append(args, c.id[1])
			if c.gen != "" {
				keys, args = append(keys, c.gen), append(args, strconv.FormatUint(seen, 10))
			}
		}
	}
	return keys, args
}

// floorArg is a's floor as admit.lua takes it: the mark as stored, "@",
// and the generation it was seen at.
func floorArg(a fencestore.Admission) string {
	b := a.Floor.AppendValue(make([]byte, 0, 48))
	b = append(b, '@')
	return string(strconv.AppendUint(b, a.FloorGeneration, 10))
}

func (c *call) callOf() *call { return c }

// run admits c with one script run. On a cluster it runs on the node
// client of the key's master, for the reason execNodes gives: the
// ClusterClient's own Process re-sends a command after a network error (up
// to MaxRedirects times, whatever MaxRetries says).
//
// The releases of its in-flight key still pending go ahead of it in one
// pipeline, so that a release made before the admission runs before it.
func (s *Store) run(ctx context.Context, c call) (any, error) {
	var p scriptPipeliner = s.client
	if cluster, ok := s.client.(*redis.ClusterClient); ok {
		node, err := cluster.MasterForKey(ctx, c.keys[0])
		if err != nil {
			return nil, err
		}
		p = node
	}
	var rels []release
	if c.fl != "" {
		rels = s.pend.forKey(nil, c.keys[1])
	}
	if len(rels) == 0 {
		keys, args := script([]*call{&c}, false)
		return admitScript.Run(ctx, p, keys, args...).Result()
	}
	// Their senders own them and send them again if these fail: the
	// errors are theirs to see.
	a := &admission{call: c}
	pipelineScripts(ctx, p, s.channel, []*admission{a}, rels, nil, make([]error, len(rels)))
	return a.reply, a.err
}

// refreshSlots asks a cluster client for a fresh slot map after an admission
// failed: the error may be a redirection (MOVED) or a master that no longer
// answers (a failover moves its slots to a replica), and admissions bypass
// the ClusterClient's own paths, which would have noticed. The reload runs in
// the background, at most one at a time.
func (s *Store) refreshSlots() {
	if cluster, ok := s.client.(*redis.ClusterClient); ok {
		cluster.ReloadState(context.Background())
	}
}

// admitAndWait sends the script and WAIT in one pipeline, so they run on one
// connection: WAIT counts the replicas that have the writes of its own
// connection. The script always writes ("w"), so the count also covers a mark
// that an equal token relied on, or a refusal reported, and another
// connection wrote.
func (s *Store) admitAndWait(ctx context.Context, c call) (any, *redis.IntCmd, error) {
	keys, args := script([]*call{&c}, true)
	key, fkey := c.keys[0], c.keys[1]
	node, err := s.nodeFor(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	var cmd *redis.Cmd
	var wait *redis.IntCmd
	// The releases of fkey still pending go first (run says why).
	var rels []release
	if c.fl != "" {
		rels = s.pend.forKey(nil, fkey)
	}
	relCmds := make([]*redis.Cmd, len(rels))
	for _, eval := range []bool{false, true} {
		pipe := node.Pipeline()
		for i, r := range rels {
			if eval {
				relCmds[i] = releaseScript.Eval(ctx, pipe, []string{r.key}, r.member, s.channel)
			} else {
				relCmds[i] = releaseScript.EvalSha(ctx, pipe, []string{r.key}, r.member, s.channel)
			}
		}
		if eval {
			cmd = admitScript.Eval(ctx, pipe, keys, args...)
		} else {
			cmd = admitScript.EvalSha(ctx, pipe, keys, args...)
		}
		// Pipeliner lacks Wait; this is the command Client.Wait builds.
		wait = redis.NewIntCmd(ctx, "wait", s.minReplicas, s.waitTimeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		// Each command keeps its own error; Exec's is the first of them.
		_, _ = pipe.Exec(ctx)
		// NOSCRIPT means the script did not run, so running it again is
		// safe. EVAL also caches it, so EVALSHA works next time.
		if !eval && isNoScript(cmd.Err()) {
			continue
		}
		break
	}
	reply, err := cmd.Result()
	// A release that met NOSCRIPT did not run ahead of the admission: it
	// runs now, and the admission looks again (recheck). Its sender owns it
	// and sends it again if this fails.
	var late map[string]bool
	for i, rc := range relCmds {
		if isNoScript(rc.Err()) {
			_ = releaseScript.Run(ctx, node, []string{rels[i].key}, rels[i].member, s.channel).Err()
			late = map[string]bool{fkey: true}
		}
	}
	if err == nil && late != nil {
		recheck(ctx, node, []*admission{{call: c, reply: reply}}, late)
	}
	return reply, wait, err
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// nodeFor returns a client whose pipelines run on one connection to the node
// that owns key. A cluster or ring client would route the keyless WAIT to some
// other node (and a cluster client re-sends the script after a lost reply: see
// execNodes).
func (s *Store) nodeFor(ctx context.Context, key string) (scriptPipeliner, error) {
	switch c := s.client.(type) {
	case masterForKeyer:
		return c.MasterForKey(ctx, key)
	case shardForKeyer:
		return c.GetShardClientForKey(key)
	}
	return s.client, nil
}

// The narrow interfaces nodeFor needs; the assertions keep them in step with
// go-redis, since a type switch would silently stop matching.
type (
	pipeliner      interface{ Pipeline() redis.Pipeliner }
	masterForKeyer interface {
		MasterForKey(context.Context, string) (*redis.Client, error)
	}
	shardForKeyer interface {
		GetShardClientForKey(string) (*redis.Client, error)
	}
)

var (
	_ masterForKeyer = (*redis.ClusterClient)(nil)
	_ shardForKeyer  = (*redis.Ring)(nil)
	_ pipeliner      = (*redis.Client)(nil)
)

// parseReply reads the script's {flag, mark, member, older, olders,
// regressed, generation} reply for a, whose in-flight key is fkey and whose run checked
// the identity want ("" for none), and rejects one that the script cannot
// have produced for it: a stale mark reported for an admission, say, would
// forward a request on a wrong answer. A regressed decision must be the one
// a.Decide takes against a's floor, exactly. Otherwise an admission must
// report a's own pair as the mark, or, for an equal token without a sequence
// under >=, that token's unchanged mark; a refusal must report a mark that
// a.Decide refuses; and with a floor no mark below it. An admission with a
// barrier must report an entry of its own order and bound, and entries of
// earlier orders as its snapshot (returned beside the decision), and
// anything else none; older 2 says the snapshot lists the oldest of more
// (snapshotCap).
// A run that found another identity than want gives a *fencestore.LostError.
func parseReply(reply any, a fencestore.Admission, fkey, want string) (fencestore.Decision, snapshot, error) {
	r, ok := reply.([]any)
	if !ok || len(r) != replyLen {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected reply %#v", reply)
	}
	flag, ok := r[0].(int64)
	if ok && flag == -1 {
		msg, _ := r[1].(string)
		return fencestore.Decision{}, snapshot{}, errors.New(msg)
	}
	if ok && flag == -2 {
		found, ok := r[1].(string)
		if !ok || want == "" || found == want {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected identity reply %#v (expecting %q)", r[1], want)
		}
		return fencestore.Decision{}, snapshot{}, &fencestore.LostError{Want: want, Found: found}
	}
	if ok && flag == -3 {
		text, _ := r[1].(string)
		got, f := fencestore.ParseDecimal(text)
		if want == "" || f != fencestore.DecimalOK {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected generation reply %#v", r[1])
		}
		return fencestore.Decision{}, snapshot{}, &fencestore.LostError{Want: want, Found: want, Rollback: true, Got: got}
	}
	genText, _ := r[6].(string)
	gen, f := fencestore.ParseDecimal(genText)
	if f != fencestore.DecimalOK {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected generation %#v", r[6])
	}
	if !ok || (flag != 0 && flag != 1) {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected admitted flag %#v", r[0])
	}
	text, ok := r[1].(string)
	if !ok {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected mark %#v", r[1])
	}
	m, ok := fencestore.ParseMarkValue(text)
	if !ok {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("mark %q is not a canonical token[:sequence]", text)
	}
	regressed, ok := r[5].(int64)
	if !ok || regressed < 0 || regressed > 2 || (regressed != 0 && !a.HasFloor) {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected regressed flag %#v", r[5])
	}
	d := fencestore.Decision{Admitted: flag == 1, Mark: m.Token, Sequence: m.Sequence, HasSequence: m.HasSequence,
		Regressed: regressed == 1, FloorVoid: regressed == 2, Generation: gen}
	if d.FloorVoid {
		// Decided without the floor: check it so.
		a.HasFloor = false
	}
	switch {
	case d.Regressed:
		// Decided against the floor: Decide without a mark says how.
		want, next, _ := a.Decide(fencestore.Mark{}, false)
		if d.Admitted != want.Admitted || m != next {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s over a regressed mark (floor %s) decided %v with mark %q",
				admissionText(a), markText(a.Floor), d.Admitted, text)
		}
	case a.HasFloor && m.Before(a.Floor):
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s reported mark %q below its floor %s, not as regressed",
			admissionText(a), text, markText(a.Floor))
	case d.Admitted:
		own := m == fencestore.Mark{Token: a.Token, Sequence: a.Sequence, HasSequence: a.HasSequence}
		unchanged := !a.HasSequence && a.Compare == fencestore.AtLeast && m.Token == a.Token
		if !own && !unchanged {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s admitted with mark %q", admissionText(a), text)
		}
	default:
		if refused, _, _ := a.Decide(m, true); refused.Admitted {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s refused by mark %q, which admits it", admissionText(a), text)
		}
	}
	member, ok1 := r[2].(string)
	older, ok2 := r[3].(int64)
	list, ok3 := r[4].(string)
	if !ok1 || !ok2 || !ok3 || older < 0 || older > 2 || (older != 0) != (list != "") {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected in-flight reply %#v", r[2:5])
	}
	if !d.Admitted || a.Flight <= 0 {
		if member != "" || older != 0 {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s without a barrier entered in flight as %q", admissionText(a), member)
		}
		return d, snapshot{}, nil
	}
	own := order41(a.Order())
	if bound, ok := memberBound(member); !ok || !strings.HasPrefix(member, own+":") ||
		bound != time.Duration(flightMillis(a))*time.Millisecond {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s entered in flight as %q", admissionText(a), member)
	}
	olders, err := parseOlders(r[4], own)
	if err != nil {
		return fencestore.Decision{}, snapshot{}, err
	}
	if older == 2 && len(olders) != snapshotCap {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("a snapshot of %d entries said to list the first %d of more", len(olders), snapshotCap)
	}
	d.Flight = fencestore.Flight{Older: older != 0, Key: fkey, Ref: member, Order: a.Order()}
	return d, snapshot{olders: olders, more: older == 2}, nil
}

// replyLen is the length of admit.lua's reply per admission: {flag, mark,
// member, older, expired, regressed, generation}.
const replyLen = 7

// admissionText spells a's token and sequence as the script's mark would.
func admissionText(a fencestore.Admission) string { return markText(a.Order()) }

// markText spells m as it is stored.
func markText(m fencestore.Mark) string { return string(m.AppendValue(nil)) }

// Mark is Get's token: the sequence of a "token:sequence" mark is not part
// of the answer.
func (s *Store) Mark(ctx context.Context, resource string) (uint64, bool, error) {
	m, ok, err := s.Get(ctx, resource)
	return m.Token, ok, err
}

// Ping sends PING and, once Expect named an identity record, reads it (on
// every live shard of a Ring): one gone or changed is a
// *fencestore.LostError. On a Cluster that reading is also what admissions
// go by (keeper.go).
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fencestore.Unavailable(err)
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fencestore.Unavailable(fmt.Errorf("redisstore: ping: %w", err))
	}
	return s.pingIdentity(ctx)
}

// Close closes the client. Closing twice is harmless. The releases still
// queued are sent first; Drains waiting stop with an error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.pend.stop()
		if s.batch != nil {
			s.batch.close()
		}
		s.mu.Lock()
		s.closed = true
		if s.listenTimer != nil {
			s.listenTimer.Stop()
		}
		if s.pubsub != nil {
			_ = s.pubsub.Close()
		}
		s.mu.Unlock()
		close(s.done)
		s.bg.Wait()
		if err := s.client.Close(); err != nil {
			s.closeErr = fmt.Errorf("redisstore: close: %w", err)
		}
	})
	return s.closeErr
}

// PolicyMayEvict reports whether a maxmemory-policy could evict a mark. The
// allkeys-* policies can. The volatile-* policies evict only keys with a TTL,
// and marks never have one; noeviction refuses writes instead (admissions then
// fail, closed). A policy this code does not know is assumed to evict.
func PolicyMayEvict(policy string) bool {
	return policy != "noeviction" && !strings.HasPrefix(policy, "volatile-")
}

// ReplicaAckError reports an admission that fewer replicas than
// Options.MinReplicas acknowledged within the WAIT timeout. Admit returns it
// wrapped with fencestore.ErrUnavailable. The mark was advanced on the primary
// regardless: like every store error, it is indeterminate.
type ReplicaAckError struct {
	Key     string
	Acked   int
	Want    int
	Timeout time.Duration
}

func (e *ReplicaAckError) Error() string {
	return fmt.Sprintf("redisstore: admit %q: %d of %d replicas acknowledged within %v", e.Key, e.Acked, e.Want, e.Timeout)
}

// ServerInfo identifies the Redis server a store's commands reach.
type ServerInfo struct {
	RunID string // changes when the server restarts or another one takes over
	Role  string // "master", or "slave" for a replica (which refuses writes)
}

// Server reads the run id and role of the server that admissions reach (INFO
// server and replication). Watching it over time shows a failover or a
// restart: both change the run id. With a cluster client the answer comes
// from one node of many, so it says little.
func (s *Store) Server(ctx context.Context) (ServerInfo, error) {
	text, err := s.client.Info(ctx, "server", "replication").Result()
	if err != nil {
		return ServerInfo{}, fencestore.Unavailable(fmt.Errorf("redisstore: INFO: %w", err))
	}
	var si ServerInfo
	for _, line := range strings.Split(text, "\r\n") {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			si.RunID = v
		} else if v, ok := strings.CutPrefix(line, "role:"); ok {
			si.Role = v
		}
	}
	if si.RunID == "" || si.Role == "" {
		return ServerInfo{}, fmt.Errorf("redisstore: INFO lacks run_id or role")
	}
	return si, nil
}
