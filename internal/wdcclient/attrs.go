package wdcclient

import (
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

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
