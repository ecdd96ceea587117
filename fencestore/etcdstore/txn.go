package etcdstore

import (
	"errors"
	"fmt"
	"math"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The admission transaction. Values are fixed-width (keys.go), so etcd's
// byte-wise comparison of a stored value with a constant is the numeric
// comparison of marks, (token, sequence) pairs included: the whole of
// fencestore.Admission.Decide is a tree of nested etcd transactions
// (Txn inside Txn), decided by etcd in one step, with no read before it
// and no retry on contention. Each admission is one such transaction; a
// batch (batch.go) nests many of them, of distinct resources, in one
// transaction that checks the identity record:
//
//	if identity == expected (only after Expect)
//	then  one transaction per admission of the batch, each:
//	      get mark                          // what Decide is run on, below
//	      if mark < B and mark > zeros19    // admitted
//	      then flight
//	           if mark < F                  // (only with a floor)
//	           then put what Decide against F gives
//	           else if mark < N then put N  // (the mark moves; only when
//	                                        //  B is above N)
//	      else if mark absent               // admitted
//	           then put N, flight           // (with a floor F: put what
//	                                        //  Decide against F gives)
//	           else (nothing)               // refused
//	      read the older flights            // (with a flight) read when admitted
//	else  get identity                      // *fencestore.LostError
//
// An admission with a floor asks whether an operator changed marks since
// the floor was seen (keeper.go): the operator's key's ModRevision above
// the floor's generation (Admission.FloorGeneration) sets the floor aside
// (Decision.FloorVoid). Where the floor admits the token, it decides only
// the branches of a mark below it and of an absent one, so those ask:
//
//	if mark < F
//	then if operator's ModRevision > floor's generation
//	     then (the mark's own outcome: N below N)    // FloorVoid
//	     else put what Decide against F gives
//
// (and the same for an absent mark: N, or the floor's outcome). A mark at
// or above the floor is decided the same with or without it, and reports
// no FloorVoid. Where the floor refuses the token, the whole tree is built
// twice, without and with the floor, under that comparison.
//
// N is the admission's own mark stored (the token, and ':' and the
// sequence when it has one). B, the bound, is N: a value below it is a
// mark that the admission passes and replaces ("<" because, with a
// sequence and under ">", an equal mark refuses). Under ">=" without a
// sequence an equal token is admitted without a write, whatever sequence
// the mark has: B is then the token followed by ';', the byte after ':',
// which every mark of that token sorts below, and only a mark below N
// moves. The common case, a mark that admits, comes first: etcd evaluates
// fewer comparisons for it. A floor that the token passes is below B, so
// every mark at or above B is above the floor too. A floor that refuses
// the token makes a smaller tree: absent or below the floor (and above
// zeros19), put the floor's outcome back; refuse in every case. "flight"
// is the put of the request's in-flight key, its bound as the value, with
// its lease (flight.go), once on the path of every branch that admits; the
// read of the keys ordered before it (the snapshot its Drain waits for)
// comes last, once, whatever branch was taken (its
// range ends below the request's own key, so the put does not change it),
// and is read only when the admission was admitted. Every put of the mark
// under a present value requires it above zeros19 (well formed), so that
// an empty value, a shorter run of zeros or a value beginning below '0' is
// never overwritten.
//
// Admit then runs Decide on the mark it read in the same transaction, and
// requires the branch that etcd took to be the one Decide takes: the
// Decision comes from the reference code, and a stored value of another
// shape (which byte order cannot judge) fails the admission.
//
// The tree is built as etcd's protocol messages, not with clientv3's Op
// and Cmp: those copy every comparison three times by reflection
// (proto.Clone), which cost as much CPU as the rest of the tree.

// flightReg is an admission's registration in the barrier.
type flightReg struct {
	key   string // the in-flight key
	lease *lease
	// older is the snapshot interpret reads from the reply: the in-flight
	// keys ordered before key, each with its bound (flight.go).
	older map[string]time.Duration
}

// leaf is one outcome of the tree, named by the path of Succeeded flags
// that leads to it ('1' then, '0' else).
type leaf struct {
	admitted bool
	write    string // the value put, "" none
	flight   bool   // the branch put the in-flight key
	void     bool   // the branch set the floor aside (an operator's change)
}

// maxPath bounds the length of a path to a leaf: two levels of the
// decision, one of the moves under it, and the operator's level above.
const maxPath = 5

// plan is an admission's tree, with its outcomes by path.
type plan struct {
	a   fencestore.Admission
	key string
	mk  []byte // key, as etcd's messages carry it
	ok  []byte // the operator's key (layout.operator); nil: no generation
	// sinceCmp is the operator's comparison (since), made once.
	sinceCmp *pb.Compare
	// base begins the path of every leaf armed; void marks them as set
	// aside (the branches built under the operator's comparison).
	base   string
	void   bool
	fl     *flightReg
	fk     []byte // fl.key, as etcd's messages carry it (and, its prefixes, the older range)
	leaves map[string]leaf
	// flightPut is the put of the in-flight key, shared by every branch
	// that admits (nil without a flight).
	flightPut *pb.RequestOp
}

// newPlan returns the plan of a in layout l. generation keeps the store
// generation (once the identity is expected, as Redis does): the floor is
// weighed against the operator's last change, and the Decision reports the
// revision.
func newPlan(l layout, a fencestore.Admission, fl *flightReg, generation bool) *plan {
	key := l.markKey(a.Resource)
	p := &plan{a: a, key: key, mk: []byte(key), fl: fl, leaves: make(map[string]leaf, 6)}
	if generation {
		p.ok = []byte(l.operator)
	}
	if fl != nil {
		p.fk = []byte(fl.key)
		p.flightPut = putOp(p.fk, boundValue(a.Flight), int64(fl.lease.id))
	}
	return p
}

// request returns the admission's own transaction: read the mark, decide,
// and, with a flight, read the older flights (the snapshot).
func (p *plan) request() *pb.RequestOp {
	then := []*pb.RequestOp{getOp(p.mk), p.tree()}
	if p.fl != nil {
		// The range's bounds are prefixes of the flight's own key.
		from, end, _ := olderRange(p.fl.key)
		then = append(then, rangeOp(p.fk[:len(from)], p.fk[:len(end)]))
	}
	return txnOp(nil, then, nil)
}

// arm records the outcome at path and returns its put of the mark, if it
// writes one.
func (p *plan) arm(path string, l leaf) []*pb.RequestOp {
	l.flight = p.fl != nil && l.admitted
	l.void = p.void
	p.leaves[p.base+path] = l
	if l.write == "" {
		return nil
	}
	return []*pb.RequestOp{putOp(p.mk, l.write, 0)}
}

// withFlight puts the flight's put before ops, those of a branch that
// admits.
func (p *plan) withFlight(ops []*pb.RequestOp) []*pb.RequestOp {
	if p.flightPut == nil {
		return ops
	}
	return append([]*pb.RequestOp{p.flightPut}, ops...)
}

// tree returns the decision (the txn below "get mark"). With a floor and
// the generation, the operator's comparison sits only where the floor
// decides: a floor that admits the token (the common case) changes the
// outcome only for a mark below it or absent, and those two branches ask
// (unlessOperator); a floor that refuses the token decides every branch,
// so the whole tree is built twice under the comparison.
func (p *plan) tree() *pb.RequestOp {
	if !p.a.HasFloor || p.ok == nil || p.floorAdmits() {
		return p.decision()
	}
	withFloor := p.a
	p.a.HasFloor, p.base, p.void = false, "1", true
	void := p.decision()
	p.a, p.base, p.void = withFloor, "0", false
	kept := p.decision()
	p.base = ""
	return txnOp([]*pb.Compare{p.since()}, []*pb.RequestOp{void}, []*pb.RequestOp{kept})
}

// floorAdmits reports whether the token passes p.a's floor.
func (p *plan) floorAdmits() bool {
	noFloor := p.a
	noFloor.HasFloor = false
	d, _, _ := noFloor.Decide(p.a.Floor, true)
	return d.Admitted
}

// since holds when an operator changed marks after the floor was seen.
// One comparison serves every place that asks (a message may be shared).
func (p *plan) since() *pb.Compare {
	if p.sinceCmp == nil {
		p.sinceCmp = &pb.Compare{Key: p.ok, Target: pb.Compare_MOD, Result: pb.Compare_GREATER,
			TargetUnion: &pb.Compare_ModRevision{ModRevision: int64(min(p.a.FloorGeneration, math.MaxInt64))}}
	}
	return p.sinceCmp
}

// unlessOperator returns the ops at path of a branch that the floor
// decides: void's, whose leaves set the floor aside, when an operator
// changed marks since the floor was seen, else kept's; kept's alone
// without the generation.
func (p *plan) unlessOperator(path string, kept, void func(path string) []*pb.RequestOp) []*pb.RequestOp {
	if p.ok == nil {
		return kept(path)
	}
	p.void = true
	v := void(path + "1")
	p.void = false
	return []*pb.RequestOp{txnOp([]*pb.Compare{p.since()}, v, kept(path+"0"))}
}

// decision is the tree of p.a, its floor included when it has one.
func (p *plan) decision() *pb.RequestOp {
	a := p.a
	n := value(a.Order())
	if !a.HasFloor {
		return p.admits(n, leaf{admitted: true, write: n}, nil)
	}
	// Below the floor, or absent: decide against the floor, and write back
	// what that gives (at least the floor).
	noFloor := a
	noFloor.HasFloor = false
	d, next, _ := noFloor.Decide(a.Floor, true)
	regressed := leaf{admitted: d.Admitted, write: value(next)}
	if d.Admitted {
		return p.admits(n, regressed, &regressed)
	}
	// The floor refuses the token, and so does every mark at or above it:
	// heal a mark below it, refuse.
	return txnOp([]*pb.Compare{p.absent()}, p.arm("1", regressed), []*pb.RequestOp{txnOp(
		[]*pb.Compare{valueCmp(p.mk, pb.Compare_LESS, value(a.Floor)), p.wellFormed()},
		p.arm("01", regressed), p.arm("00", leaf{}))})
}

// admits is the tree of an admission, whose own mark stored is n, that
// passes its floor, if it has one: a mark below its bound admits it, and
// it writes what the mark's place gives (the floor's outcome below the
// floor, when regressed is not nil; else N below N); so does an absent mark (absent is that outcome);
// any other mark refuses it. The common case, a mark that admits, comes
// first, so that etcd evaluates fewer comparisons. Every mark at or above
// the bound is above the floor too.
func (p *plan) admits(n string, absent leaf, regressed *leaf) *pb.RequestOp {
	bound := n
	if !p.a.HasSequence && p.a.Compare == fencestore.AtLeast {
		bound = n[:padWidth] + ";"
	}
	var writes, absentOps []*pb.RequestOp
	if regressed != nil {
		// Below the floor, or absent: the floor's outcome, unless an
		// operator changed marks since it was seen (then the mark's own).
		below := p.unlessOperator("11",
			func(path string) []*pb.RequestOp { return p.arm(path, *regressed) },
			func(path string) []*pb.RequestOp { return p.moves(path, n, bound) })
		writes = []*pb.RequestOp{txnOp([]*pb.Compare{valueCmp(p.mk, pb.Compare_LESS, value(p.a.Floor))},
			below, p.moves("10", n, bound))}
		absentOps = p.unlessOperator("01",
			func(path string) []*pb.RequestOp { return p.arm(path, absent) },
			func(path string) []*pb.RequestOp { return p.arm(path, leaf{admitted: true, write: n}) })
	} else {
		writes, absentOps = p.moves("1", n, bound), p.arm("01", absent)
	}
	return txnOp([]*pb.Compare{valueCmp(p.mk, pb.Compare_LESS, bound), p.wellFormed()},
		p.withFlight(writes),
		[]*pb.RequestOp{txnOp([]*pb.Compare{p.absent()}, p.withFlight(absentOps), p.arm("00", leaf{}))})
}

// moves returns the ops at path, under a mark that admits the token: a
// mark below N moves to N; under ">=" without a sequence (bound above N),
// a mark of the same token stays.
func (p *plan) moves(path, n, bound string) []*pb.RequestOp {
	if bound == n {
		return p.arm(path, leaf{admitted: true, write: n})
	}
	return []*pb.RequestOp{txnOp([]*pb.Compare{valueCmp(p.mk, pb.Compare_LESS, n)},
		p.arm(path+"1", leaf{admitted: true, write: n}), p.arm(path+"0", leaf{admitted: true}))}
}

// absent holds when the mark's key has no value.
func (p *plan) absent() *pb.Compare {
	return &pb.Compare{Key: p.mk, Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_Version{Version: 0}}
}

// wellFormed holds for every well-formed value, and for none that could
// be overwritten by mistake (zeros19).
func (p *plan) wellFormed() *pb.Compare { return valueCmp(p.mk, pb.Compare_GREATER, zeros19) }

// The protocol messages the transactions are made of.

func valueCmp(key []byte, r pb.Compare_CompareResult, v string) *pb.Compare {
	return &pb.Compare{Key: key, Target: pb.Compare_VALUE, Result: r, TargetUnion: &pb.Compare_Value{Value: []byte(v)}}
}

func getOp(key []byte) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}
}

func rangeOp(from, end []byte) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
		Key: from, RangeEnd: end}}}
}

func putOp(key []byte, v string, lease int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
		Key: key, Value: []byte(v), Lease: lease}}}
}

func txnOp(cmps []*pb.Compare, then, els []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
		Compare: cmps, Success: then, Failure: els}}}
}

// errShape reports a reply whose shape is not the transaction's.
var errShape = errors.New("etcdstore: unexpected transaction reply")

// interpret makes the Decision from the admission's own transaction's
// replies (request): the mark read, the branch taken, the older flights.
func (p *plan) interpret(rev int64, rs []*pb.ResponseOp) (fencestore.Decision, error) {
	fail := func(err error) (fencestore.Decision, error) {
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("etcdstore: admit %q: %w", p.key, err))
	}
	want := 2
	if p.fl != nil {
		want = 3
	}
	if len(rs) != want || rs[0].GetResponseRange() == nil || rs[1].GetResponseTxn() == nil {
		return fail(errShape)
	}
	var m fencestore.Mark
	var has bool
	if kvs := rs[0].GetResponseRange().Kvs; len(kvs) > 0 {
		var ok bool
		if m, ok = parseValue(kvs[0].Value); !ok {
			return fail(fmt.Errorf("corrupt mark %q: not 20 digits, or 20 digits ':' 20 digits", kvs[0].Value))
		}
		has = true
	}
	// Follow the branches to the leaf.
	path, tr := "", rs[1].GetResponseTxn()
	var l leaf
	for {
		if tr.Succeeded {
			path += "1"
		} else {
			path += "0"
		}
		var ok bool
		if l, ok = p.leaves[path]; ok {
			break
		}
		// The txn that goes on is its branch's last op.
		last := len(tr.Responses) - 1
		if last < 0 || tr.Responses[last].GetResponseTxn() == nil || len(path) >= maxPath {
			return fail(errShape)
		}
		tr = tr.Responses[last].GetResponseTxn()
	}
	a := p.a
	a.HasFloor = a.HasFloor && !l.void
	d, next, write := a.Decide(m, has)
	d.FloorVoid = l.void
	if p.ok != nil {
		d.Generation = uint64(rev)
	}
	if l.admitted != d.Admitted || (l.write != "") != write || (write && l.write != value(next)) {
		// Only a value that byte order misjudges gets here, and parseValue
		// refused every such value above; this is a net under both.
		return fail(fmt.Errorf("the transaction took branch %s over mark %+v (present %v), which Decide does not", path, m, has))
	}
	if l.flight {
		r := rs[2].GetResponseRange()
		if r == nil {
			return fail(errShape)
		}
		p.fl.older = make(map[string]time.Duration, len(r.Kvs))
		for _, kv := range r.Kvs {
			p.fl.older[string(kv.Key)] = parseBound(kv.Value, p.a.Flight)
		}
		d.Flight = fencestore.Flight{
			Older: len(r.Kvs) > 0,
			Key:   p.fl.key,
			Seq:   uint64(rev),
			Order: p.a.Order(),
		}
	}
	return d, nil
}
