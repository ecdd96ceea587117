// Command signtokens mints the signed tokens of bench/signed.sh ahead of the
// load, so that wrk (bench/wrk/signed.lua) only reads them: a new EdDSA key
// (fenceproxy token keygen's default kind), the JWK Set the proxies verify
// with, and one file of tokens per wrk thread.
//
//	signtokens -out DIR [-kind EdDSA] [-threads 2] [-keys 1000] [-prefix k] [-per-thread N] [-ttl 2h]
//
// DIR/jwks.json is the proxies' FENCE_TOKEN_KEYS_FILE, DIR/key.json the
// private key. DIR/tokens.<t> (t = 0 .. threads-1) holds, after one header
// line, per-thread tokens in blocks: thread t owns the resources
// r/<prefix><n> with n % threads == t (as bench/wrk/put.lua), "slots" of
// them, and the i-th token of its file is for resource slot i % slots, with
// fence base+i and res naming that resource. A block is one token for each
// of the thread's resources; the fences rise from block to block, so a
// reader that moves to the next block (after 1 cycle over its resources, or
// after 100) sends every resource rising tokens. DIR/check.fresh and
// DIR/check.older are two tokens for r/signed-sanity (fences 2 and 1) for
// the functional check.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

func main() {
	out := flag.String("out", "", "directory to write the key, the JWK Set and the token files to; required")
	kind := flag.String("kind", fencejwt.KindEdDSA, "key kind: EdDSA, ES256 or HS256")
	threads := flag.Int("threads", 2, "wrk threads (one token file each)")
	keys := flag.Int("keys", 1000, "resources over all threads (r/<prefix>0 .. r/<prefix>(keys-1))")
	prefix := flag.String("prefix", "k", "resource name prefix after r/ (wrk's KEYPREFIX)")
	perThread := flag.Int("per-thread", 100_000, "tokens per thread (rounded up to whole blocks)")
	ttl := flag.Duration("ttl", 2*time.Hour, "tokens' lifetime from now (exp)")
	base := flag.Uint64("base", uint64(time.Now().Unix())*1_000_000_000, "fence of each file's first token (default: <epoch seconds>000000000, as put.lua's tokens)")
	flag.Parse()
	if *out == "" || *threads < 1 || *keys < *threads || *perThread < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	priv, set, err := fencejwt.NewKey(*kind, "bench-"+*kind)
	if err != nil {
		log.Fatal(err)
	}
	signer, err := fencejwt.ParseSigningKey(priv)
	if err != nil {
		log.Fatal(err)
	}
	write(filepath.Join(*out, "key.json"), priv)
	write(filepath.Join(*out, "jwks.json"), set)
	exp := time.Now().Add(*ttl)
	sign := func(fence uint64, res string) string {
		tok, err := signer.Sign(fencejwt.Claims{Fence: fence, Expiry: exp, Resource: res})
		if err != nil {
			log.Fatal(err)
		}
		return tok
	}
	write(filepath.Join(*out, "check.fresh"), []byte(sign(2, "r/signed-sanity")+"\n"))
	write(filepath.Join(*out, "check.older"), []byte(sign(1, "r/signed-sanity")+"\n"))

	start := time.Now()
	total := 0
	for t := range *threads {
		slots := (*keys-1-t) / *threads + 1 // as put.lua: the keys n with n % threads == t
		n := (*perThread + slots - 1) / slots * slots
		toks := make([]string, n)
		var wg sync.WaitGroup
		workers := runtime.GOMAXPROCS(0)
		for w := range workers {
			wg.Go(func() {
				for i := w; i < n; i += workers {
					toks[i] = sign(*base+uint64(i), "r/"+*prefix+strconv.Itoa(t+(i%slots)**threads))
				}
			})
		}
		wg.Wait()
		path := filepath.Join(*out, "tokens."+strconv.Itoa(t))
		f, err := os.Create(path)
		if err != nil {
			log.Fatal(err)
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		fmt.Fprintf(bw, "#signed-tokens threads=%d keys=%d prefix=%s thread=%d slots=%d count=%d\n", *threads, *keys, *prefix, t, slots, n)
		for _, tok := range toks {
			bw.WriteString(tok)
			bw.WriteByte('\n')
		}
		if err := bw.Flush(); err != nil {
			log.Fatal(err)
		}
		if err := f.Close(); err != nil {
			log.Fatal(err)
		}
		total += n
	}
	fmt.Fprintf(os.Stderr, "signtokens: %d %s tokens (%d threads, %d resources) in %s, into %s\n",
		total, *kind, *threads, *keys, time.Since(start).Round(time.Millisecond), *out)
}

func write(path string, data []byte) {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		log.Fatal(err)
	}
}
