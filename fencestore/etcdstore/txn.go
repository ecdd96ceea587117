package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The admission transaction. Values are fixed-width (keys.go), so etcd's
// byte-wise comparison of a stored value with a constant is the numeric
// comparison of marks, (token, sequence) pairs included: the whole of
// fencestore.Admission.Decide is a tree of nested etcd transactions
// (Txn inside Txn), decided by etcd in one step, with no read before it
// and no retry on contention. The tree, for an admission whose own mark
// stored is N (the token, and ':' and the sequence when it has one):
//
//	if identity == expected (only after Expect)
//	then  get mark                          // what Decide is run on, below
//	      if mark absent                    // (with a floor F: absent, or mark < F:
//	      then put N, flight                //  put what Decide against F gives)
//	      else if mark < W and mark > zeros19
//	           then put N, flight           // admitted, the mark moves
//	           else if mark < A and mark > zeros19   (only ">=" without a sequence)
//	                then flight             // admitted, the mark stays
//	                else (nothing)          // refused
//	else  get identity                      // *fencestore.LostError
//
// W is N: a value below it is a mark that the admission passes and
// replaces ("<" because, with a sequence and under ">", an equal mark
// refuses). Under ">=" without a sequence an equal token is admitted
// without a write, whatever sequence the mark has: A is the token followed
// by ';', the byte after ':', which every mark of that token sorts below.
// "flight" is the registration in the drain barrier: a put of the
// request's in-flight key with its lease, and a count of the keys ordered
// before it (flight.go).
//
// Admit then runs Decide on the mark it read in the same transaction, and
// requires the branch that etcd took to be the one Decide takes: the
// Decision comes from the reference code, and a stored value of another
// shape (which byte order cannot judge) fails the admission.

// flightReg is an admission's registration in the barrier.
type flightReg struct {
	key   string // the in-flight key
	older string // the start of the range of its resource's keys
	lease *lease
}

// leaf is one outcome of the tree, named by the path of Succeeded flags
// that leads to it ('1' then, '0' else).
type leaf struct {
	admitted bool
	write    string // the value put, "" none
	flight   bool   // the branch registered the flight (its last op counts the older ones)
}

// plan is an admission's tree, with its outcomes by path.
type plan struct {
	a      fencestore.Admission
	key    string
	fl     *flightReg
	leaves map[string]leaf
}

func (p *plan) flightOps(admitted bool) []clientv3.Op {
	if p.fl == nil || !admitted {
		return nil
	}
	from, end, _ := olderRange(p.fl.key)
	return []clientv3.Op{
		clientv3.OpPut(p.fl.key, "", clientv3.WithLease(p.fl.lease.id)),
		clientv3.OpGet(from, clientv3.WithRange(end), clientv3.WithCountOnly()),
	}
}

// arm records the outcome at path and returns its ops.
func (p *plan) arm(path string, l leaf) []clientv3.Op {
	l.flight = p.fl != nil && l.admitted
	p.leaves[path] = l
	ops := p.flightOps(l.admitted)
	if l.write != "" {
		ops = append([]clientv3.Op{clientv3.OpPut(p.key, l.write)}, ops...)
	}
	return ops
}

// tree returns the decision (the txn below "get mark").
func (p *plan) tree() clientv3.Op {
	a := p.a
	n := value(a.Order())
	absent := clientv3.Compare(clientv3.Version(p.key), "=", 0)
	wellFormed := clientv3.Compare(clientv3.Value(p.key), ">", zeros19)
	// present is the tree under a mark that exists (and is not below the
	// floor), from path.
	present := func(path string) clientv3.Op {
		var els []clientv3.Op
		if !a.HasSequence && a.Compare == fencestore.AtLeast {
			els = []clientv3.Op{clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(p.key), "<", n[:padWidth]+";"), wellFormed},
				p.arm(path+"01", leaf{admitted: true}),
				p.arm(path+"00", leaf{}),
			)}
		} else {
			p.arm(path+"0", leaf{})
		}
		return clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(p.key), "<", n), wellFormed},
			p.arm(path+"1", leaf{admitted: true, write: n}),
			els,
		)
	}
	if !a.HasFloor {
		return clientv3.OpTxn([]clientv3.Cmp{absent},
			p.arm("1", leaf{admitted: true, write: n}),
			[]clientv3.Op{present("0")})
	}
	// Below the floor, or absent: decide against the floor, and write back
	// what that gives (at least the floor).
	noFloor := a
	noFloor.HasFloor = false
	d, next, _ := noFloor.Decide(a.Floor, true)
	regressed := leaf{admitted: d.Admitted, write: value(next)}
	return clientv3.OpTxn([]clientv3.Cmp{absent},
		p.arm("1", regressed),
		[]clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(p.key), "<", value(a.Floor)), wellFormed},
			p.arm("01", regressed),
			[]clientv3.Op{present("00")},
		)})
}

// admit runs one admission transaction.
func (s *Store) admit(ctx context.Context, a fencestore.Admission, fl *flightReg) (fencestore.Decision, error) {
	key := s.keys.markKey(a.Resource)
	p := &plan{a: a, key: key, fl: fl, leaves: make(map[string]leaf, 4)}
	then := []clientv3.Op{clientv3.OpGet(key), p.tree()}
	txn := s.client.Txn(ctx)
	expect := s.expectation()
	if expect != "" {
		txn = txn.If(clientv3.Compare(clientv3.Value(s.keys.identity), "=", expect)).
			Then(then...).Else(clientv3.OpGet(s.keys.identity))
	} else {
		txn = txn.Then(then...)
	}
	resp, err := txn.Commit()
	if err != nil {
		return fencestore.Decision{}, s.fail(ctx, fmt.Sprintf("admit %q", key), err)
	}
	if !resp.Succeeded {
		found := ""
		if r := resp.Responses[0].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
			found = string(r.Kvs[0].Value)
		}
		return fencestore.Decision{}, &fencestore.LostError{Want: expect, Found: found}
	}
	return p.interpret(resp.Header.Revision, resp.Responses)
}

// errShape reports a reply whose shape is not the transaction's.
var errShape = errors.New("etcdstore: unexpected transaction reply")

// interpret makes the Decision from the mark read and the branch taken.
func (p *plan) interpret(rev int64, rs []*pb.ResponseOp) (fencestore.Decision, error) {
	fail := func(err error) (fencestore.Decision, error) {
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("etcdstore: admit %q: %w", p.key, err))
	}
	if len(rs) != 2 || rs[0].GetResponseRange() == nil || rs[1].GetResponseTxn() == nil {
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
	var ops []*pb.ResponseOp
	for {
		if tr.Succeeded {
			path += "1"
		} else {
			path += "0"
		}
		var ok bool
		if l, ok = p.leaves[path]; ok {
			ops = tr.Responses
			break
		}
		if len(tr.Responses) != 1 || tr.Responses[0].GetResponseTxn() == nil || len(path) > 4 {
			return fail(errShape)
		}
		tr = tr.Responses[0].GetResponseTxn()
	}
	d, next, write := p.a.Decide(m, has)
	if l.admitted != d.Admitted || (l.write != "") != write || (write && l.write != value(next)) {
		// Only a value that byte order misjudges gets here, and parseValue
		// refused every such value above; this is a net under both.
		return fail(fmt.Errorf("the transaction took branch %s over mark %+v (present %v), which Decide does not", path, m, has))
	}
	if l.flight {
		r := ops[len(ops)-1].GetResponseRange()
		if r == nil {
			return fail(errShape)
		}
		d.Flight = fencestore.Flight{
			Older: r.Count > 0,
			Key:   p.fl.key,
			Ref:   strconv.FormatInt(int64(p.fl.lease.id), 16),
			Seq:   uint64(rev),
			Order: p.a.Order(),
		}
	}
	return d, nil
}
