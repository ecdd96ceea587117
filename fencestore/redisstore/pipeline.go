package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The exchanges of group commit (batch.go): the pipelines a worker sends,
// on a single server, a Cluster, or a Ring.

// pipelineScripts pipelines one EVALSHA of release.lua per release of rels
// (announcing on channel), then one of admit.lua per admission of live, on
// p, sets each admission's reply, and each release's error in errs (aligned
// with rels). opt shapes the admissions' runs and what follows them.
func pipelineScripts(ctx context.Context, p scriptPipeliner, channel string, live []*admission, rels []release,
	cmds []*redis.Cmd, errs []error, opt scriptOpts,
) []*redis.Cmd {
	pipe := p.Pipeline()
	var relCmds []*redis.Cmd
	for _, r := range rels {
		relCmds = append(relCmds, releaseScript.EvalSha(ctx, pipe, []string{r.key}, r.member, channel))
	}
	for _, a := range live {
		keys, args := opt.run(a, channel)
		cmds = append(cmds, admitScript.EvalSha(ctx, pipe, keys, args...))
	}
	if opt.after != nil && len(live) > 0 {
		opt.after(pipe)
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error

	// NOSCRIPT (a restarted or flushed server): the script did not run for
	// those, so running them again with EVAL is safe, and caches it. A
	// release that ran late, after the admissions it was meant to precede,
	// leaves their snapshots to be looked at again (recheck).
	var retry redis.Pipeliner
	var late map[string]bool
	for i, c := range relCmds {
		if isNoScript(c.Err()) {
			if retry == nil {
				retry = p.Pipeline()
			}
			relCmds[i] = releaseScript.Eval(ctx, retry, []string{rels[i].key}, rels[i].member, channel)
			if late == nil {
				late = make(map[string]bool)
			}
			late[rels[i].key] = true
		}
	}
	again := false
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			if retry == nil {
				retry = p.Pipeline()
			}
			keys, args := opt.run(live[i], channel)
			cmds[i] = admitScript.Eval(ctx, retry, keys, args...)
			again = true
		}
	}
	if again && opt.after != nil {
		opt.after(retry)
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	for i, c := range relCmds {
		errs[i] = c.Err()
	}
	for i, a := range live {
		a.reply, a.err = cmds[i].Result()
		cmds[i] = nil
	}
	recheck(ctx, p, live, late)
	return cmds
}

// scriptOpts shapes the admissions' script runs of pipelineScripts: w adds
// admit.lua's "w" (with WAIT), riders ride the first admission's run
// (withReleases), and after, when set, adds commands behind the
// admissions in each pipeline that carries some (WAIT, which counts the
// replicas that have the writes of its own connection).
type scriptOpts struct {
	w      bool
	riders []release
	after  func(redis.Pipeliner)
}

// run is the keys and arguments of a's run of admit.lua.
func (o scriptOpts) run(a *admission, channel string) ([]string, []any) {
	keys, args := script([]*admission{a}, o.w)
	if len(o.riders) > 0 {
		keys, args = withReleases(o.riders, channel, keys, args)
	}
	return keys, args
}

// recheck narrows the snapshot of each admission of live that entered a
// key of late to the entries still there: a release of that key meant to
// run ahead of it ran after it (its EVALSHA met NOSCRIPT, and EVAL ran it
// later). Its Drain would learn so from the release's announcement anyway;
// this keeps Older exact. A look that fails leaves the snapshot as it was:
// a Drain that looks when it need not, never an admission that should have
// waited.
func recheck(ctx context.Context, c doer, live []*admission, late map[string]bool) {
	if len(late) == 0 {
		return
	}
	for _, a := range live {
		r, ok := a.reply.([]any)
		if a.err != nil || !ok || len(r) != replyLen || !late[a.keys[1]] || r[3] != int64(1) {
			continue
		}
		text, ok := r[4].(string)
		if !ok || text == "" {
			continue
		}
		list := strings.Split(text, " ")
		gone, err := missingIn(ctx, c, a.keys[1], list)
		if err != nil || len(gone) == 0 {
			continue
		}
		kept := slices.DeleteFunc(list, func(m string) bool { return slices.Contains(gone, m) })
		r[4] = strings.Join(kept, " ")
		if len(kept) == 0 {
			r[3] = int64(0)
		}
	}
}

// doer sends one command (a client, a node's client).
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// missingIn returns the members of members not in the sorted set key, by
// one ZMSCORE on c. Not the client's ZMScore, which reads a missing
// member's nil as the score 0, every entry's own score.
func missingIn(ctx context.Context, c doer, key string, members []string) ([]string, error) {
	args := make([]any, 0, 2+len(members))
	args = append(args, "zmscore", key)
	for _, m := range members {
		args = append(args, m)
	}
	r, err := c.Do(ctx, args...).Slice()
	if err != nil {
		return nil, err
	}
	if len(r) != len(members) {
		return nil, fmt.Errorf("ZMSCORE answered %d values for %d members", len(r), len(members))
	}
	var gone []string
	for i, v := range r {
		if v == nil {
			gone = append(gone, members[i])
		}
	}
	return gone, nil
}

// scriptPipeliner runs scripts, alone or in pipelines, and commands.
type scriptPipeliner interface {
	pipeliner
	redis.Scripter
	doer
}

// execNodes admits live and releases rels on a cluster: it pipelines each
// admission to the master that owns its key on that node's own client,
// never on the ClusterClient's pipeline, which re-sends a batch after a lost
// connection (up to MaxRedirects times, whatever MaxRetries says): an
// admission that had run would run again, and a ">" one then be refused by
// its own mark. A node client retries as MaxRetries allows, which New wants
// at -1 (none). An admission's two keys share a slot (flightKey), so one
// node has both; the releases go one per key, since one script run may
// touch one slot only.
//
// A redirection (MOVED, ASK: the slot is elsewhere, or moving) is answered
// as the error it is; the script did not run. Following it would take a
// client for an address the ClusterClient does not lend out.
//
// execNodes sends all the parts of one batch and returns once every master
// answered: it serves the releases a closing store still sends (drain).
// A worker's batches go through the masters' lanes instead (lanes.go), so
// that one master's silence holds back no other's.
func (b *batcher) execNodes(ctx context.Context, live []*admission, rels []release, errs []error) {
	parts, _ := b.byMaster(ctx, live, rels, errs)
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			perrs := make([]error, len(p.rels))
			pipelineScripts(ctx, p.node, b.channel, p.live, p.rels, make([]*redis.Cmd, 0, len(p.live)), perrs, scriptOpts{})
			for j, err := range perrs {
				errs[p.at[j]] = err
			}
		})
	}
	wg.Wait()
}

// byMaster splits live and rels by the master that owns their keys (an
// admission's two keys share a slot: flightKey); each part's releases
// keep their place in rels (at). An admission whose master cannot be found
// (no slot map) gets the error, and is returned in failed; a release's goes
// in errs, at its place.
func (b *batcher) byMaster(ctx context.Context, live []*admission, rels []release, errs []error) (parts map[*redis.Client]*part, failed []*admission) {
	parts = make(map[*redis.Client]*part)
	partFor := func(key string) (*part, error) {
		node, err := b.cluster.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		p := parts[node]
		if p == nil {
			p = &part{node: node}
			parts[node] = p
		}
		return p, nil
	}
	for i, r := range rels {
		p, err := partFor(r.key)
		if err != nil {
			errs[i] = err
			continue
		}
		p.rels, p.at = append(p.rels, r), append(p.at, i)
	}
	for _, a := range live {
		p, err := partFor(a.keys[0])
		if err != nil {
			a.err = err
			failed = append(failed, a)
			continue
		}
		p.live = append(p.live, a)
	}
	return parts, failed
}

// execOne admits live with one run of admit.lua over all their keys, in
// queue order, and releases rels in the same run, ahead of them (one script
// run, not two: the releases ride it); admit.lua's reply holds a {flag,
// mark, member, older, olders, regressed, generation} group per admission.
// Admissions that expect another identity than the one before them (an
// Expect between the two) start a run of their own, in the same pipeline:
// one run checks one identity. Releases with no admission to ride go in one
// run of release.lua.
func (b *batcher) execOne(ctx context.Context, live []*admission, rels []release, errs []error) {
	pipe := b.client.Pipeline()
	type run struct {
		live []*admission
		keys []string
		args []any
		cmd  *redis.Cmd
	}
	var runs []*run
	for i := 0; i < len(live); {
		j := i + 1
		for j < len(live) && live[j].id == live[i].id {
			j++
		}
		r := &run{live: live[i:j]}
		r.keys, r.args = script(r.live, false)
		if i == 0 && len(rels) > 0 {
			r.keys, r.args = withReleases(rels, b.channel, r.keys, r.args)
		}
		runs = append(runs, r)
		i = j
	}
	var relKeys []string
	var relArgs []any
	var release *redis.Cmd
	if len(runs) == 0 && len(rels) > 0 {
		relKeys, relArgs = b.releaseCall(rels)
		release = releaseScript.EvalSha(ctx, pipe, relKeys, relArgs...)
	}
	for _, r := range runs {
		r.cmd = admitScript.EvalSha(ctx, pipe, r.keys, r.args...)
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error

	// NOSCRIPT: the script did not run, so running it again with EVAL is
	// safe, and caches it. The runs keep their order, the releases riding
	// the first one included.
	var retry redis.Pipeliner
	if release != nil && isNoScript(release.Err()) {
		retry = b.client.Pipeline()
		release = releaseScript.Eval(ctx, retry, relKeys, relArgs...)
	}
	for _, r := range runs {
		if isNoScript(r.cmd.Err()) {
			if retry == nil {
				retry = b.client.Pipeline()
			}
			r.cmd = admitScript.Eval(ctx, retry, r.keys, r.args...)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	if len(runs) > 0 && len(rels) > 0 {
		release = runs[0].cmd
		if refused(release.Err()) {
			// Redis refused the admissions' run before it ran (above
			// maxmemory, which admissions are not allowed past, say): the
			// releases, which free memory, go on their own at once rather
			// than wait for an admission that fares no better.
			relKeys, relArgs = b.releaseCall(rels)
			release = releaseScript.Run(ctx, b.client, relKeys, relArgs...)
		}
	}
	if release != nil {
		// One run for them all: they fare alike.
		if err := release.Err(); err != nil {
			for i := range errs {
				errs[i] = err
			}
		}
	}
	for _, r := range runs {
		reply, err := r.cmd.Slice()
		if err == nil && len(reply) != replyLen*len(r.live) {
			err = fmt.Errorf("redisstore: batch of %d got %d replies", len(r.live), len(reply))
		}
		for i, a := range r.live {
			if err != nil {
				a.err = err
			} else {
				a.reply = reply[replyLen*i : replyLen*i+replyLen]
			}
		}
	}
}

// withReleases returns the keys and arguments of a run of admit.lua that
// releases rels (announcing on channel) ahead of the admissions of keys and
// args.
func withReleases(rels []release, channel string, keys []string, args []any) ([]string, []any) {
	k := make([]string, 0, len(rels)+len(keys))
	a := make([]any, 0, 3+len(rels)+len(args))
	a = append(a, "r", strconv.Itoa(len(rels)), channel)
	for _, r := range rels {
		k = append(k, r.key)
		a = append(a, r.member)
	}
	return append(k, keys...), append(a, args...)
}

// refused reports whether err is Redis's refusal of the admissions' run
// before it ran for want of memory (OOM above maxmemory), which admit.lua
// is not allowed past and release.lua, flagged allow-oom, is. Other
// refusals (a replica's READONLY, an ACL's NOPERM, LOADING) refuse a
// release just as well: sending the riding releases alone would cost a
// round trip that cannot succeed; they stay pending and are retried.
func refused(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "OOM")
}

// releaseCall is one release.lua run's keys and arguments for rels: each
// release's in-flight key, its member in the same order, then the channel
// that announces them.
func (b *batcher) releaseCall(rels []release) (keys []string, args []any) {
	keys = make([]string, len(rels))
	args = make([]any, 0, len(rels)+1)
	for i, r := range rels {
		keys[i] = r.key
		args = append(args, r.member)
	}
	return keys, append(args, b.channel)
}
