// Package deploy holds checks of the deployment files shipped at the repository root.
package deploy
