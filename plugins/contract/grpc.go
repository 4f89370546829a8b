package contract

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins/contract/proto"
)

// ErrBadAnswer is returned by the gRPC client when an explorer's answer does
// not fit the question (a plan of the wrong length, say); the fault-tolerant
// wrapper treats it like any other explorer failure.
var ErrBadAnswer = errors.New("explorer answered out of protocol")

// GRPCClient is hparam.Explorer on the host, over the explorer protocol.
type GRPCClient struct{ c proto.ExplorerClient }

// NewGRPCClient wraps a connection to an explorer server.
func NewGRPCClient(cc grpc.ClientConnInterface) *GRPCClient {
	return &GRPCClient{c: proto.NewExplorerClient(cc)}
}

var _ hparam.Explorer = (*GRPCClient)(nil)

func (g *GRPCClient) Describe(ctx context.Context) (hparam.Descriptor, error) {
	d, err := g.c.Describe(ctx, &proto.DescribeRequest{})
	if err != nil {
		return hparam.Descriptor{}, explorerError(err)
	}
	return hparam.Descriptor{
		Name:           d.GetName(),
		Version:        d.GetVersion(),
		Hyperparameter: d.GetHyperparameter(),
		Scale:          hparam.Scale(d.GetScale()),
		Bounds:         boundsFrom(d.GetBounds()),
		Spread:         spreadFrom(d.GetSpread()),
		ExampleConfig:  d.GetExampleConfig(),
	}, nil
}

func (g *GRPCClient) Init(ctx context.Context, s hparam.Setup) error {
	_, err := g.c.Init(ctx, &proto.Setup{
		Name:        s.Name,
		Config:      s.Config,
		Ranks:       int64(s.Ranks),
		TotalSteps:  int64(s.TotalSteps),
		WindowSteps: int64(s.WindowSteps),
		Seed:        s.Seed,
		Probe:       s.Probe,
	})
	return explorerError(err)
}

func (g *GRPCClient) Plan(ctx context.Context, r hparam.WindowRequest) (hparam.WindowPlan, error) {
	p, err := g.c.Plan(ctx, &proto.WindowRequest{Window: int64(r.Window), Start: int64(r.Start), Steps: int64(r.Steps)})
	if err != nil {
		return hparam.WindowPlan{}, explorerError(err)
	}
	if len(p.GetBase()) != r.Steps {
		return hparam.WindowPlan{}, fmt.Errorf("%w: plan for window %d has %d base values, want %d", ErrBadAnswer, r.Window, len(p.GetBase()), r.Steps)
	}
	end := hparam.SearchState(p.GetSearchAtEnd())
	if end < hparam.SearchNone || end > hparam.SearchDone {
		return hparam.WindowPlan{}, fmt.Errorf("%w: search state %d at the run's end in the plan of window %d", ErrBadAnswer, p.GetSearchAtEnd(), r.Window)
	}
	return hparam.WindowPlan{Base: p.GetBase(), Spread: spreadFrom(p.GetSpread()), Bounds: boundsFrom(p.GetBounds()), Probe: p.GetProbe(), SearchAtEnd: end}, nil
}

func (g *GRPCClient) Observe(ctx context.Context, o hparam.Observation) (hparam.Feedback, error) {
	f, err := g.c.Observe(ctx, &proto.Observation{Window: int64(o.Window), Values: o.Values, Losses: o.Losses, Probe: o.Probe, Level: o.Level})
	if err != nil {
		return hparam.Feedback{}, explorerError(err)
	}
	if w := f.GetWeights(); len(w) != 0 && len(w) != len(o.Values) {
		return hparam.Feedback{}, fmt.Errorf("%w: %d weights for %d ranks in window %d", ErrBadAnswer, len(w), len(o.Values), o.Window)
	}
	search := hparam.SearchState(f.GetSearch())
	if search < hparam.SearchNone || search > hparam.SearchDone {
		return hparam.Feedback{}, fmt.Errorf("%w: search state %d in window %d", ErrBadAnswer, f.GetSearch(), o.Window)
	}
	return hparam.Feedback{Weights: f.GetWeights(), Base: f.GetBase(), Estimate: f.GetEstimate(), Offset: f.GetOffset(), Search: search}, nil
}

func (g *GRPCClient) Commit(ctx context.Context) (hparam.Commitment, error) {
	c, err := g.c.Commit(ctx, &proto.CommitRequest{})
	if err != nil {
		return hparam.Commitment{}, explorerError(err)
	}
	return hparam.Commitment{Offset: c.GetOffset(), Value: c.GetValue(), Note: c.GetNote()}, nil
}

func (g *GRPCClient) SaveState(ctx context.Context) ([]byte, error) {
	s, err := g.c.SaveState(ctx, &proto.SaveStateRequest{})
	if err != nil {
		return nil, explorerError(err)
	}
	return s.GetState(), nil
}

func (g *GRPCClient) LoadState(ctx context.Context, state []byte) error {
	_, err := g.c.LoadState(ctx, &proto.State{State: state})
	return explorerError(err)
}

// explorerError turns an error the explorer returned back into its plain
// message, so a config error reads as the explorer wrote it: gRPC's
// InvalidArgument (an explorer refusing its input: its config, a window)
// wraps hparam.ErrInvalid again, and so does Unimplemented; Unknown is
// any other error; transport
// errors (deadline, connection) keep their gRPC status.
func explorerError(err error) error {
	s, ok := status.FromError(err)
	switch {
	case !ok:
		return err
	case s.Code() == codes.InvalidArgument || s.Code() == codes.Unimplemented:
		// Unimplemented: an explorer built before a call existed (Commit)
		// would refuse it again after a restart.
		return refusal(s.Message())
	case s.Code() == codes.Unknown:
		return errors.New(s.Message())
	}
	return err
}

// refusal is an explorer's hparam.ErrInvalid on the host side.
type refusal string

func (r refusal) Error() string { return string(r) }
func (refusal) Unwrap() error   { return hparam.ErrInvalid }

// serverError sends an error wrapping hparam.ErrInvalid as gRPC's
// InvalidArgument, so the host can tell a refusal (which a restarted
// explorer would repeat) from a failure; other errors go as they are.
func serverError(err error) error {
	if errors.Is(err, hparam.ErrInvalid) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return err
}

// GRPCServer serves an hparam.Explorer over the explorer protocol.
type GRPCServer struct {
	proto.UnimplementedExplorerServer
	Impl hparam.Explorer
}

func (s *GRPCServer) Describe(ctx context.Context, _ *proto.DescribeRequest) (*proto.Descriptor, error) {
	d, err := s.Impl.Describe(ctx)
	if err != nil {
		return nil, serverError(err)
	}
	return &proto.Descriptor{
		Name:           d.Name,
		Version:        d.Version,
		Hyperparameter: d.Hyperparameter,
		Scale:          string(d.Scale),
		Bounds:         boundsTo(d.Bounds),
		Spread:         spreadTo(d.Spread),
		ExampleConfig:  d.ExampleConfig,
	}, nil
}

func (s *GRPCServer) Init(ctx context.Context, in *proto.Setup) (*proto.InitResponse, error) {
	err := s.Impl.Init(ctx, hparam.Setup{
		Name:        in.GetName(),
		Config:      in.GetConfig(),
		Ranks:       int(in.GetRanks()),
		TotalSteps:  int(in.GetTotalSteps()),
		WindowSteps: int(in.GetWindowSteps()),
		Seed:        in.GetSeed(),
		Probe:       in.GetProbe(),
	})
	if err != nil {
		return nil, serverError(err)
	}
	return &proto.InitResponse{}, nil
}

func (s *GRPCServer) Plan(ctx context.Context, in *proto.WindowRequest) (*proto.WindowPlan, error) {
	p, err := s.Impl.Plan(ctx, hparam.WindowRequest{Window: int(in.GetWindow()), Start: int(in.GetStart()), Steps: int(in.GetSteps())})
	if err != nil {
		return nil, serverError(err)
	}
	return &proto.WindowPlan{Base: p.Base, Spread: spreadTo(p.Spread), Bounds: boundsTo(p.Bounds), Probe: p.Probe, SearchAtEnd: proto.SearchState(p.SearchAtEnd)}, nil
}

func (s *GRPCServer) Observe(ctx context.Context, in *proto.Observation) (*proto.Feedback, error) {
	f, err := s.Impl.Observe(ctx, hparam.Observation{Window: int(in.GetWindow()), Values: in.GetValues(), Losses: in.GetLosses(), Probe: in.GetProbe(), Level: in.GetLevel()})
	if err != nil {
		return nil, serverError(err)
	}
	return &proto.Feedback{Weights: f.Weights, Base: f.Base, Estimate: f.Estimate, Offset: f.Offset, Search: proto.SearchState(f.Search)}, nil
}

func (s *GRPCServer) Commit(ctx context.Context, _ *proto.CommitRequest) (*proto.Commitment, error) {
	c, err := s.Impl.Commit(ctx)
	if err != nil {
		return nil, serverError(err)
	}
	return &proto.Commitment{Offset: c.Offset, Value: c.Value, Note: c.Note}, nil
}

func (s *GRPCServer) SaveState(ctx context.Context, _ *proto.SaveStateRequest) (*proto.State, error) {
	b, err := s.Impl.SaveState(ctx)
	if err != nil {
		return nil, serverError(err)
	}
	return &proto.State{State: b}, nil
}

func (s *GRPCServer) LoadState(ctx context.Context, in *proto.State) (*proto.LoadStateResponse, error) {
	if err := s.Impl.LoadState(ctx, in.GetState()); err != nil {
		return nil, serverError(err)
	}
	return &proto.LoadStateResponse{}, nil
}

func boundsTo(b hparam.Bounds) *proto.Bounds { return &proto.Bounds{Lower: b.Lower, Upper: b.Upper} }
func boundsFrom(b *proto.Bounds) hparam.Bounds {
	return hparam.Bounds{Lower: b.GetLower(), Upper: b.GetUpper()}
}
func spreadTo(s hparam.Spread) *proto.Spread {
	return &proto.Spread{Kind: string(s.Kind), Alpha: s.Alpha}
}
func spreadFrom(s *proto.Spread) hparam.Spread {
	return hparam.Spread{Kind: hparam.SpreadKind(s.GetKind()), Alpha: s.GetAlpha()}
}
