package workflows

import (
	"errors"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
)

// refusedWith is the workflow's error type when it refused to run.
func (s *taskSuite) refusedWith(env *testsuite.TestWorkflowEnvironment) string {
	s.Require().True(env.IsWorkflowCompleted())
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(env.GetWorkflowError(), &appErr), "got %v", env.GetWorkflowError())
	return appErr.Type()
}

// A task checks its own input whoever started it, and runs nothing it
// refuses: no worker is selected, nothing is launched.
func (s *taskSuite) TestATaskRefusesInputItWasNotGiven() {
	iss, err := identity.NewIssuer(spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	s.Require().NoError(err)
	v, err := identity.NewVerifier(identity.ModeRequired, iss.TrustDomain(), iss.Bundle())
	s.Require().NoError(err)
	submitter := func(name string) *identity.Signer {
		svid, err := iss.Issue(spiffeid.RequireFromString("spiffe://wdc.local/wdc/submitter/"+name), time.Hour)
		s.Require().NoError(err)
		sg, err := identity.NewSigner(svid)
		s.Require().NoError(err)
		return sg
	}
	workerSVID, err := iss.IssueWorker("worker-a", time.Hour)
	s.Require().NoError(err)
	workerSigner, err := identity.NewSigner(workerSVID)
	s.Require().NoError(err)
	alice := submitter("alice")
	for _, tc := range []struct {
		name     string
		identity bool
		change   func(*api.TaskInput, *client.StartWorkflowOptions)
		want     lease.RejectReason // "" runs
	}{
		{name: "signed by its submitter", identity: true},
		{name: "unsigned, identity off", change: func(in *api.TaskInput, _ *client.StartWorkflowOptions) { in.Authority = nil }},
		{name: "unsigned", identity: true, want: lease.RejectUnauthenticated,
			change: func(in *api.TaskInput, _ *client.StartWorkflowOptions) { in.Authority = nil }},
		{name: "signed by a worker", identity: true, want: lease.RejectWrongIdentity, change: func(in *api.TaskInput, _ *client.StartWorkflowOptions) {
			p, err := workerSigner.Sign(api.TaskAuthorityKind, api.TaskAuthorityOf(in.Envelope, in.EnvelopeDigest), time.Now())
			s.Require().NoError(err)
			in.Authority = p
		}},
		{name: "another command under the submitter's signature", identity: true, want: lease.RejectInvalidInput,
			change: func(in *api.TaskInput, _ *client.StartWorkflowOptions) {
				in.Envelope.Command = []string{"cat", "/etc/shadow"}
			}},
		{name: "another command, its digest too", identity: true, want: lease.RejectUnauthenticated, change: func(in *api.TaskInput, _ *client.StartWorkflowOptions) {
			in.Envelope.Command = []string{"cat", "/etc/shadow"}
			in.EnvelopeDigest, _ = in.Envelope.Digest()
		}},
		{name: "signed more than MaxAuthorityAge before it started", identity: true, want: lease.RejectReplayed, change: func(in *api.TaskInput, _ *client.StartWorkflowOptions) {
			p, err := alice.Sign(api.TaskAuthorityKind, api.TaskAuthorityOf(in.Envelope, in.EnvelopeDigest), time.Now().Add(-MaxAuthorityAge-time.Minute))
			s.Require().NoError(err)
			in.Authority = p
		}},
		{name: "options out of range, identity off", want: lease.RejectInvalidInput,
			change: func(in *api.TaskInput, _ *client.StartWorkflowOptions) { in.Options.MaxAttempts = 1 << 20 }},
		{name: "under another workflow ID, identity off", want: lease.RejectInvalidInput,
			change: func(_ *api.TaskInput, o *client.StartWorkflowOptions) { o.ID = "wdc-task/someone-else" }},
		{name: "a task ID with '..', identity off", want: lease.RejectInvalidInput, change: func(in *api.TaskInput, o *client.StartWorkflowOptions) {
			in.Envelope.TaskID = "../privdir"
			in.EnvelopeDigest, _ = in.Envelope.Digest()
			o.ID = api.TaskWorkflowID(in.Envelope.TaskID)
		}},
		{name: "an input named outside the task directory, identity off", want: lease.RejectInvalidInput, change: func(in *api.TaskInput, _ *client.StartWorkflowOptions) {
			in.Envelope.Inputs = append(in.Envelope.Inputs, envelope.Input{Name: "../../etc/cron.d/x", Digest: "sha256:" + strings.Repeat("a", 64)})
			in.EnvelopeDigest, _ = in.Envelope.Digest()
		}},
	} {
		s.Run(tc.name, func() {
			s.env = s.NewTestWorkflowEnvironment()
			s.SetupTestWith(nil)
			s.submitter = alice
			defer func() { s.submitter = nil }()
			if tc.identity {
				s.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{Interceptor(v)}})
			}
			in := s.startInput(s.env, api.TaskOptions{LeaseTTL: 30 * time.Second})
			co, _ := TaskStart(s.envl.RunID, api.AddTaskInput{Envelope: s.envl})
			opts := client.StartWorkflowOptions{ID: co.WorkflowID, TaskQueue: co.TaskQueue, TypedSearchAttributes: co.TypedSearchAttributes}
			if tc.change != nil {
				tc.change(&in, &opts)
			}
			s.env.SetStartWorkflowOptions(opts)
			s.env.ExecuteWorkflow(api.TaskWorkflowType, in)
			if tc.want == "" {
				s.Require().NoError(s.env.GetWorkflowError())
				s.NotEmpty(s.launches)
				for _, l := range s.launches {
					s.Equal(in.Authority, l.Authority, "every launch carries the submitter's signature")
				}
				return
			}
			s.Equal(string(tc.want), s.refusedWith(s.env))
			s.Empty(s.grants, "no worker selected")
			s.Empty(s.launches, "nothing launched")
		})
	}
}
