package client_test

import (
	"context"
	"fmt"
	"time"

	sdkclient "go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
)

// Submit a task and wait for its result, as `wdc tasks submit --wait`
// does (needs a server and a control plane: `wdc server start-dev` and
// `wdc control-plane`, and an agent to run it). A task with input files
// goes through SealInputs first.
func ExampleClient_SubmitTask() {
	ctx := context.Background()
	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: "127.0.0.1:7233", Namespace: "default"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tc.Close()
	wdc := &client.Client{C: tc, CallTimeout: 30 * time.Second}
	env := envelope.Envelope{TaskID: "checksum-1", RunID: "run-1", WorldID: "w1", Command: []string{"/bin/true"}}
	res, err := wdc.SubmitTask(ctx, env, api.TaskOptions{LeaseTTL: 30 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := wdc.WaitTask(ctx, res.TaskID)
	fmt.Println(out.State, out.Attempts, err)
}
