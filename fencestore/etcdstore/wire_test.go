package etcdstore_test

import (
	"context"
	"io"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// tcpProxy stands between one client and an etcd member: it can hold
// etcd's replies back for a while (Delay: a reply that comes after the
// caller gave up, the request applied all the same) or be down (Down:
// every connection cut and new ones closed at once, so a request in that
// time never reaches etcd).
type tcpProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds added to etcd's bytes on their way back
	down   atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, endpoint string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: strings.TrimPrefix(endpoint, "http://"), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Endpoint is the proxy's URL for a client.
func (p *tcpProxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

// Delay holds etcd's replies back for d from now on.
func (p *tcpProxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Down cuts every connection and refuses new ones while on.
func (p *tcpProxy) Down(on bool) {
	p.down.Store(on)
	if on {
		p.mu.Lock()
		for c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
	}
}

func (p *tcpProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(c, true)
		p.track(up, true)
		p.wg.Add(2)
		go func() { // towards etcd: at once
			defer p.wg.Done()
			_, _ = io.Copy(up, c)
			_ = up.Close()
			_ = c.Close()
			p.track(up, false)
		}()
		go func() { // back: each chunk held for the delay
			defer p.wg.Done()
			p.back(c, up)
			_ = c.Close()
			_ = up.Close()
			p.track(c, false)
		}()
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

func (p *tcpProxy) back(c, up net.Conn) {
	ch := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := range ch {
			time.Sleep(time.Until(k.at))
			if _, err := c.Write(k.b); err != nil {
				for range ch {
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			ch <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	<-done
}

func (p *tcpProxy) close() {
	_ = p.ln.Close()
	p.Down(true)
	p.wg.Wait()
}

// rpcCount counts the calls a client makes to etcd: unary calls (a
// transaction, a read, a lease grant) by method, and the watches it
// creates on its watch streams.
type rpcCount struct {
	mu    sync.Mutex
	calls map[string]int
}

func (r *rpcCount) add(m string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[m]++
}

// Calls returns the counts by method.
func (r *rpcCount) Calls() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.calls)
}

// Total is every round trip counted so far.
func (r *rpcCount) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		n += c
	}
	return n
}

// countingClient is a client of endpoints whose calls r counts.
func countingClient(t testing.TB, r *rpcCount, endpoints ...string) *clientv3.Client {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				r.add(method[strings.LastIndex(method, "/")+1:])
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				s, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil {
					return nil, err
				}
				return &countedStream{ClientStream: s, r: r}, nil
			}),
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

type countedStream struct {
	grpc.ClientStream
	r *rpcCount
}

func (s *countedStream) SendMsg(m any) error {
	if w, ok := m.(*pb.WatchRequest); ok && w.GetCreateRequest() != nil {
		s.r.add("WatchCreate")
	}
	return s.ClientStream.SendMsg(m)
}
