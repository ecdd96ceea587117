package etcdstore

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// Two deployments whose key prefixes nest (`fence:` and `fence:billing:`)
// on one etcd: etcd's keys are one flat namespace, so the inner one's keys
// are marks of the outer one (`billing:orders/42`), and its identity record
// one of them. Nesting, run at start, refuses either side:
//
//   - the inner one finds the identity record of a shorter prefix: every
//     key that is a beginning of its prefix (and "\x00", the record of an
//     empty prefix) read in one transaction;
//   - the outer one finds a record under its prefix that is not a mark:
//     among the nestingTop greatest values under its prefix, sorted by etcd
//     (one range read; etcd reads the range to sort it, so its cost grows
//     with the marks, once, at start). Every forced or lost record sorts
//     above every mark (a letter after the digits), and so does a record of
//     32 hex digits unless its first digits sort below the greatest mark's
//     (a record beginning "00..." under marks of 19 digits and more); the
//     inner one's in-flight records (their bound in decimal digits) may sort
//     above it too, up to nestingTop of them. Such a rare record is not seen
//     here. A deployment that started on the store before the outer one
//     wrote its record is refused by the outer's own start too: a store
//     with marks and no identity record.
//
// With a user of etcd's RBAC granted its prefix only, the shorter prefixes
// cannot be read: that half is not checked.

// ErrNestedPrefix is wrapped by Nesting's error.
var ErrNestedPrefix = errors.New("the key prefix nests with another deployment's")

// nestingBatch bounds the reads of one transaction (etcd's default
// --max-txn-ops is 128).
const nestingBatch = 100

// nestingTop is how many of the greatest values under the prefix Nesting
// looks at.
const nestingTop = 64

// Nesting reports a key prefix that nests with another deployment's on the
// same etcd: a shorter prefix that holds an identity record, or an
// identity or lost record among the keys under this prefix.
func (s *Store) Nesting(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.shorterPrefixes(ctx); err != nil {
		return err
	}
	resp, err := s.client.Get(ctx, s.keys.marksFrom, clientv3.WithRange(s.keys.marksEnd),
		clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend), clientv3.WithLimit(nestingTop))
	if err != nil {
		return s.fail(ctx, "nesting", err)
	}
	for _, kv := range resp.Kvs {
		if _, ok := parseValue(kv.Value); ok || !fencestore.IdentityShaped(string(kv.Value)) {
			continue
		}
		return fmt.Errorf("%w: %q holds the identity record of a deployment with prefix %q, under this one's %q; "+
			"use prefixes of which neither is a beginning of the other", ErrNestedPrefix, kv.Key, kv.Key, s.keys.prefix)
	}
	return nil
}

// shorterPrefixes reads the identity record each shorter prefix would have.
func (s *Store) shorterPrefixes(ctx context.Context) error {
	if s.keys.prefix == "" {
		return nil
	}
	keys := []string{"\x00"} // the empty prefix's record
	for i := 1; i < len(s.keys.prefix); i++ {
		keys = append(keys, s.keys.prefix[:i])
	}
	for len(keys) > 0 {
		n := min(len(keys), nestingBatch)
		ops := make([]clientv3.Op, n)
		for i, k := range keys[:n] {
			ops[i] = clientv3.OpGet(k)
		}
		resp, err := s.client.Txn(ctx).Then(ops...).Commit()
		if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
			return nil // a user granted its own prefix only
		}
		if err != nil {
			return s.fail(ctx, "nesting", err)
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) > 0 && fencestore.IdentityShaped(string(kvs[0].Value)) {
				owner := keys[i]
				if owner == "\x00" {
					owner = ""
				}
				return fmt.Errorf("%w: %q holds the identity record of a deployment with prefix %q, of which %q is an extension; "+
					"use prefixes of which neither is a beginning of the other", ErrNestedPrefix, kvs[0].Key, owner, s.keys.prefix)
			}
		}
		keys = keys[n:]
	}
	return nil
}
