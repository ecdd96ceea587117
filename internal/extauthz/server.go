package extauthz

import (
	"context"
	"errors"
	"net/http"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Server is Envoy's Authorization service over an authorization-mode
// http.Handler. It is safe for concurrent use.
type Server struct {
	h      http.Handler
	log    *zap.Logger
	health *health.Server
}

var _ authv3.AuthorizationServer = (*Server)(nil)

// New returns a Server that asks h about every Check. h answers as the HTTP
// form of authorization mode does: 200 to allow, a problem+json refusal
// otherwise, with Fence-Decision on both; it counts its decisions, so the
// Server counts nothing. log receives warnings for CheckRequests that
// cannot be read and errors for handler panics; if nil, nothing is logged.
func New(h http.Handler, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	hs := health.NewServer()
	hs.SetServingStatus(authv3.Authorization_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return &Server{h: h, log: log.Named("extauthz"), health: hs}
}

// Register registers the Authorization service and the standard gRPC
// health service (grpc.health.v1.Health) on g. Health reports SERVING, for
// the empty service name and for envoy.service.auth.v3.Authorization,
// from New until Shutdown. It does not follow the store's readiness: an
// Envoy that stops calling an unhealthy authorization cluster fails the
// call, and with failure_mode_allow that would let requests through.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	authv3.RegisterAuthorizationServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// Shutdown reports NOT_SERVING to health probes from now on, so that
// probes see the server leave before grpc.Server.GracefulStop ends the
// calls in progress. Check keeps answering.
func (s *Server) Shutdown() { s.health.Shutdown() }

// Check answers Envoy's question about one request. It never returns an
// error: every outcome, a refusal, a CheckRequest it cannot read (400) and a
// handler that panicked (500) included, is a CheckResponse, so Envoy denies
// rather than treating the service as failed.
func (s *Server) Check(ctx context.Context, cr *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	r, err := newRequest(ctx, cr)
	if err != nil {
		var why malformed
		if !errors.As(err, &why) {
			why = errNoHTTP // newRequest returns only malformed values
		}
		s.log.Warn("malformed check request",
			zap.String("reason", string(why)),
			zap.String("request_id", cr.GetAttributes().GetRequest().GetHttp().GetId()))
		return badRequest(why), nil
	}
	w, ok := s.serve(r)
	if !ok {
		return internalError(), nil
	}
	if w.truncated {
		s.log.Warn("handler answer body truncated",
			zap.Int("limit", maxBody),
			zap.String("request_id", cr.GetAttributes().GetRequest().GetHttp().GetId()))
	}
	code, h := w.result()
	return checkResponse(code, h, w.body), nil
}

// serve runs the handler on r. ok is false when it panicked: what it had
// written is discarded and the caller denies (fail closed).
func (s *Server) serve(r *http.Request) (w *recorder, ok bool) {
	w = &recorder{}
	defer func() {
		if v := recover(); v != nil {
			fields := []zap.Field{
				zap.Any("panic", v),
				zap.String("method", r.Method),
				zap.String("path", r.URL.Path),
				zap.String("request_id", r.Header.Get("X-Request-Id")),
			}
			if v != http.ErrAbortHandler { // net/http's quiet abort: no stack
				fields = append(fields, zap.Stack("stack"))
			}
			s.log.Error("handler panicked; request denied", fields...)
			w, ok = nil, false
		}
	}()
	s.h.ServeHTTP(w, r)
	return w, true
}
