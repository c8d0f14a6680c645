package client

import (
	"context"
	"fmt"
	"sort"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
)

// MissingSearchAttributes returns the attributes of want that namespace ns
// lacks (or has with another type), sorted by name.
func MissingSearchAttributes(ctx context.Context, c client.Client, ns string, want map[string]enumspb.IndexedValueType) ([]string, error) {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return nil, fmt.Errorf("namespace %s: list search attributes: %w", ns, err)
	}
	var missing []string
	for name, typ := range want {
		if got, ok := resp.GetCustomAttributes()[name]; !ok || got != typ {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return missing, nil
}

// AddSearchAttributes registers the named attributes of want on ns.
func AddSearchAttributes(ctx context.Context, c client.Client, ns string, names []string, want map[string]enumspb.IndexedValueType) error {
	add := make(map[string]enumspb.IndexedValueType, len(names))
	for _, n := range names {
		add[n] = want[n]
	}
	_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: ns, SearchAttributes: add})
	if err != nil {
		return fmt.Errorf("namespace %s: add search attributes %s: %w", ns, strings.Join(names, ", "), err)
	}
	return nil
}

// CheckSearchAttributes verifies that wdc's search attributes exist on ns;
// with register set it adds the missing ones. A namespace without them
// would fail every wdc workflow task, so the error says how to fix it.
func CheckSearchAttributes(ctx context.Context, c client.Client, ns string, register bool) error {
	want := api.SearchAttributes()
	missing, err := MissingSearchAttributes(ctx, c, ns, want)
	if err != nil || len(missing) == 0 {
		return err
	}
	if register {
		return AddSearchAttributes(ctx, c, ns, missing, want)
	}
	var cmds []string
	for _, n := range missing {
		typ := "Keyword"
		if want[n] == enumspb.INDEXED_VALUE_TYPE_INT {
			typ = "Int"
		}
		cmds = append(cmds, fmt.Sprintf("temporal operator search-attribute create --namespace %s --name %s --type %s", ns, n, typ))
	}
	return fmt.Errorf("namespace %s lacks wdc's search attributes %s; rerun with --register-search-attributes, or create them: %s",
		ns, strings.Join(missing, ", "), strings.Join(cmds, "; "))
}
