package client

import (
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
)

// Keyword is the value of the keyword search attribute name in sa, or ""
// when sa has none.
func Keyword(sa *commonpb.SearchAttributes, name string) string { return keyword(sa, name) }

func keyword(sa *commonpb.SearchAttributes, name string) string {
	p, ok := sa.GetIndexedFields()[name]
	if !ok {
		return ""
	}
	var s string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &s); err != nil {
		return ""
	}
	return s
}

func intAttr(sa *commonpb.SearchAttributes, name string) int64 {
	p, ok := sa.GetIndexedFields()[name]
	if !ok {
		return 0
	}
	var n int64
	if err := converter.GetDefaultDataConverter().FromPayload(p, &n); err != nil {
		return 0
	}
	return n
}

// profile decodes the worker profile a registry entry publishes in its
// memo (api.MemoWorkerProfile); nil when absent or undecodable.
func profile(memo *commonpb.Memo) *fleet.Profile {
	p, ok := memo.GetFields()[api.MemoWorkerProfile]
	if !ok {
		return nil
	}
	var out fleet.Profile
	if err := converter.GetDefaultDataConverter().FromPayload(p, &out); err != nil || out.WorkerID == "" {
		return nil
	}
	return &out
}
