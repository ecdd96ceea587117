package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The identity and the store generation (fencestore/generation.go) in a
// bolt file. Both live in the meta bucket under names bound to the key
// prefix ("identity:<prefix>", "generation:<prefix>", "op:<prefix>"), so
// that a deployment that changes its prefix finds no identity (a new store:
// FENCE_STORE_INIT decides) rather than an identity over marks it never
// kept. The generation is advanced in the same bolt transaction as every
// mark write (an admission's group commit, an operator's Raise or Reset).
//
// The file is used by one process, so the replica that remembers the
// greatest generation seen is that process; to remember it across a
// restart it also keeps it in a file of its own beside the store
// (Options.GenerationFile: "<path>.generation" unless set), rewritten after
// each commit that advanced it, without an fsync of its own (it may lag
// the store after a crash, which is safe: only a store below it is lost).
// A bolt file copied back from a backup while that file stays fails the
// first admission after the restart as gone back in time. A backup
// restored together with that file is not seen.

const (
	identityName   = "identity:"
	generationName = "generation:"
	opName         = "op:"
	// legacyIdentity is where files written before the identity was bound
	// to the prefix keep it (migrateIdentity).
	legacyIdentity = "identity"
)

func (s *Store) metaKey(name string) []byte { return []byte(name + s.prefix) }

// generation reads the generation and the operator's generation in tx.
func (s *Store) generation(tx *bolt.Tx) (gen, op uint64, err error) {
	b := tx.Bucket(metaBucket)
	if b == nil {
		return 0, 0, nil
	}
	for _, x := range []struct {
		name string
		to   *uint64
	}{{generationName, &gen}, {opName, &op}} {
		v := b.Get(s.metaKey(x.name))
		if v == nil {
			continue
		}
		n, f := fencestore.ParseDecimal(v)
		if f != fencestore.DecimalOK {
			return 0, 0, fmt.Errorf("corrupt generation %q at %q", v, s.metaKey(x.name))
		}
		*x.to = n
	}
	return gen, op, nil
}

// advance writes the generation after gen in tx, and, for an operator's
// change, makes it the operator's generation; it returns it.
func (s *Store) advance(tx *bolt.Tx, gen uint64, operator bool) (uint64, error) {
	b, err := tx.CreateBucketIfNotExists(metaBucket)
	if err != nil {
		return 0, err
	}
	gen++
	v := strconv.AppendUint(nil, gen, 10)
	if err := b.Put(s.metaKey(generationName), v); err != nil {
		return 0, err
	}
	if operator {
		if err := b.Put(s.metaKey(opName), v); err != nil {
			return 0, err
		}
	}
	return gen, nil
}

// operatorChange advances the generation for an operator's Raise or Reset.
func (s *Store) operatorChange(tx *bolt.Tx) error {
	gen, _, err := s.generation(tx)
	if err != nil {
		return err
	}
	_, err = s.advance(tx, gen, true)
	return err
}

// rememberFile is the record of the generation file: the generation, a
// space, the identity it belongs to, padded with spaces so that every
// rewrite covers the last.
func rememberRecord(gen uint64, id string) []byte {
	b := fmt.Appendf(nil, "%020d %s", gen, id)
	if len(b) < 127 {
		b = append(b, bytes.Repeat([]byte{' '}, 127-len(b))...)
	}
	return append(b, '\n')
}

// remember records gen for the identity expected, when it is above what
// the file holds.
func (s *Store) remember(gen uint64) {
	if s.genFile == nil {
		return
	}
	id := s.expect.Load()
	if id == nil || *id == "" {
		return
	}
	s.genMu.Lock()
	defer s.genMu.Unlock()
	if gen <= s.genWritten {
		return
	}
	if _, err := s.genFile.WriteAt(rememberRecord(gen, *id), 0); err == nil {
		s.genWritten = gen
	}
}

// recall reads the generation the file remembers for id, 0 when it
// remembers another identity or nothing.
func (s *Store) recall(id string) uint64 {
	if s.genFile == nil {
		return 0
	}
	buf := make([]byte, 256)
	n, _ := s.genFile.ReadAt(buf, 0)
	fields := strings.Fields(string(buf[:n]))
	if len(fields) != 2 || fields[1] != id {
		return 0
	}
	gen, err := strconv.ParseUint(fields[0], 10, 64) // zero-padded
	if err != nil {
		return 0
	}
	return gen
}

// openGenerationFile opens (creating) the file that remembers the
// generation across restarts.
func openGenerationFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// MarkLost writes a lost record in place of the identity record, unless it
// holds one that supersedes want, in its own durable commit.
func (s *Store) MarkLost(ctx context.Context, want string) (string, error) {
	var held string
	err := s.keeperUpdate(ctx, "mark lost", func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		lost, keep := fencestore.LostOver(string(b.Get(s.metaKey(identityName))), want)
		if held = lost; keep {
			return nil
		}
		return b.Put(s.metaKey(identityName), []byte(held))
	})
	return held, err
}

// migrateIdentity binds the identity record of a file written before
// records were bound to the prefix: the unbound record becomes this
// prefix's only when every mark in the file is under it (or there is none),
// so a prefix change never inherits another prefix's record.
func (s *Store) migrateIdentity(tx *bolt.Tx) error {
	meta := tx.Bucket(metaBucket)
	if meta == nil {
		return nil
	}
	old := meta.Get([]byte(legacyIdentity))
	if old == nil || meta.Get(s.metaKey(identityName)) != nil {
		return nil
	}
	if b := tx.Bucket(bucket); b != nil {
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if !bytes.HasPrefix(k, []byte(s.prefix)) {
				return nil
			}
		}
	}
	return meta.Put(s.metaKey(identityName), bytes.Clone(old))
}

// Restore sets the store's generation back to gen, as a file copied back
// from a backup taken then would hold it (tests).
func (s *Store) Restore(gen uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		return b.Put(s.metaKey(generationName), strconv.AppendUint(nil, gen, 10))
	})
}
