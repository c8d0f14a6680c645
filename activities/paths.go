package activities

import (
	"fmt"
	"path/filepath"

	"github.com/wdc-runtime/wdc/internal/envelope"
)

// stagedPath joins an artifact name to a staging dir after checking the
// name with the output-path rule, so no name can leave the directory.
func stagedPath(dir, name string) (string, error) {
	if err := envelope.ValidateRelativePath(name); err != nil {
		return "", fmt.Errorf("artifact name: %w", err)
	}
	return filepath.Join(dir, filepath.FromSlash(name)), nil
}
