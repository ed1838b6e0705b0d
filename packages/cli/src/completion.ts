import type { Command, Option } from 'commander';

/** The shells `warren completion` writes a script for. */
export const COMPLETION_SHELLS = ['bash', 'zsh', 'fish'] as const;
export type CompletionShell = (typeof COMPLETION_SHELLS)[number];

/** One option of a command, as completion needs it. */
export interface CompletionOption {
  /** `--cwd`, `-i`, ... (long first). */
  flags: string[];
  /** True when the next word is the option's value (`--cwd PATH`). */
  takesValue: boolean;
  /** The values it accepts, when commander knows them (`--state running|paused|...`). */
  choices: string[];
  description: string;
}

/** One command of the tree: its path from the program (`['snapshot', 'create']`), names, options and children. */
export interface CompletionNode {
  path: string[];
  /** The name, then its aliases (`ls`, `list`). */
  names: string[];
  description: string;
  options: CompletionOption[];
  /** The values each positional argument accepts, where commander knows them (`completion <shell>`); empty for free text. */
  argumentChoices: string[][];
  /** Options after the first argument belong to the command run (`exec ID -- ls -la`), so nothing is completed there. */
  passThrough: boolean;
  children: CompletionNode[];
}

/** The first sentence of a description, on one line: what a completion menu shows. */
function summary(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim();
  const end = line.search(/[.:;](\s|$)/);
  return end > 0 ? line.slice(0, end) : line;
}

function completionOption(option: Option): CompletionOption {
  return {
    flags: [option.long, option.short].filter((f): f is string => typeof f === 'string'),
    takesValue: option.required || option.optional,
    choices: option.argChoices ?? [],
    description: summary(option.description),
  };
}

/**
 * The command tree as completion sees it, read from commander itself (commands, aliases, options,
 * the help option, hidden commands left out), so a script made from it never goes stale.
 *
 * @example
 * completionTree(buildProgram()).children.map((c) => c.names[0]); // ['serve', 'runtime-image', 'create', ...]
 */
export function completionTree(command: Command, path: string[] = []): CompletionNode {
  const help = command.createHelp();
  return {
    path,
    names: [command.name(), ...command.aliases()],
    description: summary(command.description()),
    options: help.visibleOptions(command).map(completionOption),
    argumentChoices: command.registeredArguments.map((argument) => argument.argChoices ?? []),
    // Commander has no getter for passThroughOptions(); its field is read as it is.
    passThrough: (command as unknown as { _passThroughOptions?: boolean })._passThroughOptions === true,
    children: help.visibleCommands(command).map((child) => completionTree(child, [...path, child.name()])),
  };
}

function nodes(root: CompletionNode): CompletionNode[] {
  return [root, ...root.children.flatMap(nodes)];
}

/** A word quoted for bash, zsh and fish alike (single quotes; fish reads `\'` inside them, the others close and reopen). */
function quote(text: string, shell: CompletionShell): string {
  if (shell === 'fish') return `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  return `'${text.replace(/'/g, "'\\''")}'`;
}

/** `name:description` for zsh's `_describe`, colons in the name escaped. */
function described(name: string, description: string): string {
  return `${name.replace(/:/g, '\\:')}:${description}`;
}

/**
 * One shell function that is a `case` table over its arguments (the command path, `snapshot
 * create`, and maybe a word after a slash): the listed keys run their answer, any other key
 * returns 1.
 */
function table(shell: CompletionShell, name: string, args: string, entries: [key: string, answer: string][]): string {
  if (shell === 'fish') {
    const cases = entries.map(([key, answer]) => `    case ${quote(key, shell)}\n      ${answer}`).join('\n');
    return `function ${name}\n  switch ${args}\n${cases}\n    case '*'\n      return 1\n  end\nend`;
  }
  const cases = entries.map(([key, answer]) => `    ${quote(key, shell)}) ${answer} ;;`).join('\n');
  return `${name}() {\n  case ${args} in\n${cases}\n    *) return 1 ;;\n  esac\n}`;
}

/** A command that prints these lines, one word (or word and description) each. */
function printLines(shell: CompletionShell, lines: string[]): string {
  return lines.length === 0 ? 'return 0' : `printf '%s\\n' ${lines.map((l) => quote(l, shell)).join(' ')}`;
}

/** The tables of a tree, in one shell's syntax. */
function tables(root: CompletionNode, shell: CompletionShell): string {
  const all = nodes(root);
  const key = (node: CompletionNode) => node.path.join(' ');
  const withDescriptions = shell !== 'bash';
  const word = (name: string, description: string) => (withDescriptions ? (shell === 'zsh' ? described(name, description) : `${name}\t${description}`) : name);
  const arg = (n: number) => (shell === 'fish' ? `"$argv[${n}]"` : `"$${n}"`);
  const pathAndWord = shell === 'fish' ? `"$argv[1]/$argv[2]"` : `"$1/$2"`;
  const child = table(
    shell,
    '__warren_child',
    pathAndWord,
    all.flatMap((node) => node.children.flatMap((c) => c.names.map((n): [string, string] => [`${key(node)}/${n}`, printLines(shell, [c.names[0]!])]))),
  );
  const valued = table(
    shell,
    '__warren_takes_value',
    pathAndWord,
    all.flatMap((node) => node.options.filter((o) => o.takesValue).flatMap((o) => o.flags.map((f): [string, string] => [`${key(node)}/${f}`, 'return 0']))),
  );
  const choices = table(
    shell,
    '__warren_choices',
    pathAndWord,
    all.flatMap((node) =>
      node.options
        .filter((o) => o.choices.length > 0)
        .flatMap((o) => o.flags.map((f): [string, string] => [`${key(node)}/${f}`, printLines(shell, o.choices)])),
    ),
  );
  const argumentChoices = table(
    shell,
    '__warren_argument_choices',
    pathAndWord,
    all.flatMap((node) =>
      node.argumentChoices.flatMap((values, i): [string, string][] => (values.length > 0 ? [[`${key(node)}/${i}`, printLines(shell, values)]] : [])),
    ),
  );
  const commands = table(
    shell,
    '__warren_commands',
    arg(1),
    all
      .filter((n) => n.children.length > 0)
      .map((node) => [
        key(node),
        printLines(
          shell,
          node.children.flatMap((c) => c.names.map((n) => word(n, c.description))),
        ),
      ]),
  );
  const options = table(
    shell,
    '__warren_options',
    arg(1),
    all.map((node) => [
      key(node),
      printLines(
        shell,
        node.options.flatMap((o) => o.flags.map((f) => word(f, o.description))),
      ),
    ]),
  );
  const passThrough = table(
    shell,
    '__warren_passthrough',
    arg(1),
    all.filter((n) => n.passThrough).map((node) => [key(node), 'return 0']),
  );
  return [child, valued, choices, argumentChoices, commands, options, passThrough].join('\n\n');
}

const HEADER = (shell: CompletionShell, how: string) =>
  `# ${shell} completion for warren, generated by \`warren completion ${shell}\` from the command tree
# of this version of warren (regenerate it after an upgrade).
#
# ${how}
`;

function bash(root: CompletionNode): string {
  return `${HEADER('bash', 'Load it now: source <(warren completion bash); for every shell: warren completion bash > ~/.local/share/bash-completion/completions/warren')}
${tables(root, 'bash')}

# Walks the words before the cursor: subcommands extend the command path, an option that takes a
# value skips that value, and after the first argument of a pass-through command (exec ID, shell
# ID) or after --, every word belongs to the command run in the sandbox.
_warren() {
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD-1]} cmdpath= word child skip= i args=0
  COMPREPLY=()
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=\${COMP_WORDS[i]}
    if [[ -n $skip ]]; then skip=; continue; fi
    [[ $word == -- ]] && return 0
    if [[ $word == -* ]]; then
      [[ $word != *=* ]] && __warren_takes_value "$cmdpath" "$word" && skip=1
      continue
    fi
    if ((args == 0)) && child=$(__warren_child "$cmdpath" "$word"); then
      cmdpath=\${cmdpath:+$cmdpath }$child
    else
      __warren_passthrough "$cmdpath" && return 0
      args=$((args + 1))
    fi
  done
  if [[ -n $skip ]]; then
    COMPREPLY=($(compgen -W "$(__warren_choices "$cmdpath" "$prev")" -- "$cur"))
  elif [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(__warren_options "$cmdpath")" -- "$cur"))
  elif ((args == 0)) && __warren_commands "$cmdpath" >/dev/null; then
    COMPREPLY=($(compgen -W "$(__warren_commands "$cmdpath")" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(__warren_argument_choices "$cmdpath" "$args")" -- "$cur"))
  fi
  return 0
}

complete -o default -F _warren warren
`;
}

function zsh(root: CompletionNode): string {
  return `#compdef warren
${HEADER('zsh', 'Load it now: source <(warren completion zsh) (after compinit); for every shell: warren completion zsh > "${fpath[1]}/_warren"')}
${tables(root, 'zsh')}

# The same walk as the bash script's: subcommands extend the command path, an option that takes a
# value skips that value, and nothing is completed inside the command of exec or shell.
_warren() {
  local cur=\${words[CURRENT]} prev=\${words[CURRENT-1]} cmdpath= word child skip=
  local -i i args=0
  local -a items
  for ((i = 2; i < CURRENT; i++)); do
    word=\${words[i]}
    if [[ -n $skip ]]; then skip=; continue; fi
    [[ $word == -- ]] && return 0
    if [[ $word == -* ]]; then
      [[ $word != *=* ]] && __warren_takes_value "$cmdpath" "$word" && skip=1
      continue
    fi
    if ((args == 0)) && child=$(__warren_child "$cmdpath" "$word"); then
      cmdpath=\${cmdpath:+$cmdpath }$child
    else
      __warren_passthrough "$cmdpath" && return 0
      args+=1
    fi
  done
  if [[ -n $skip ]]; then
    items=(\${(f)"$(__warren_choices "$cmdpath" "$prev")"})
    if (( $#items )); then compadd -a items; else _files; fi
  elif [[ $cur == -* ]]; then
    items=(\${(f)"$(__warren_options "$cmdpath")"})
    _describe -t options option items
  elif ((args == 0)) && items=(\${(f)"$(__warren_commands "$cmdpath")"}) && (( $#items )); then
    _describe -t commands command items
  elif items=(\${(f)"$(__warren_argument_choices "$cmdpath" "$args")"}) && (( $#items )); then
    compadd -a items
  else
    _files
  fi
}

if [[ \${zsh_eval_context[-1]} == loadautofunc ]]; then
  _warren "$@"
else
  compdef _warren warren
fi
`;
}

function fish(root: CompletionNode): string {
  return `${HEADER('fish', 'Load it now: warren completion fish | source; for every shell: warren completion fish > ~/.config/fish/completions/warren.fish')}
${tables(root, 'fish')}

# One line, STATE|PATH: PATH the command path of the words before the cursor (subcommands only),
# STATE the number of arguments after it, or \`value\` when the cursor is on an option's value.
# Status 1 inside the command of exec or shell, where warren completes nothing.
function __warren_path
  set -l cmdpath ''
  set -l skip 0
  set -l args 0
  set -l tokens (commandline -opc)
  set -e tokens[1]
  for word in $tokens
    if test $skip = 1
      set skip 0
      continue
    end
    test "$word" = -- ; and return 1
    if string match -q -- '-*' $word
      if not string match -q -- '*=*' $word; and __warren_takes_value "$cmdpath" $word
        set skip 1
      end
      continue
    end
    set -l child (__warren_child "$cmdpath" $word)
    if test $args = 0; and test -n "$child"
      set cmdpath (string trim -- "$cmdpath $child")
    else
      __warren_passthrough "$cmdpath"; and return 1
      set args (math $args + 1)
    end
  end
  if test $skip = 1
    echo "value|$cmdpath"
  else
    echo "$args|$cmdpath"
  end
end

function __warren_complete
  set -l line (__warren_path); or return 0
  set -l state (string replace -r '\\|.*' '' -- $line)
  set -l cmdpath (string replace -r '^[^|]*\\|' '' -- $line)
  set -l cur (commandline -ct)
  set -l prev (commandline -opc)[-1]
  if test "$state" = value
    __warren_choices "$cmdpath" "$prev"
  else if string match -q -- '-*' "$cur"
    __warren_options "$cmdpath"
  else if test "$state" = 0; and __warren_commands "$cmdpath" >/dev/null
    __warren_commands "$cmdpath"
  else
    __warren_argument_choices "$cmdpath" "$state"
  end
end

# Where warren offers nothing (a file argument, a value without choices), fish offers files.
function __warren_files
  set -l words (__warren_complete)
  test (count $words) -eq 0
end

complete -c warren -f -a '(__warren_complete)'
complete -c warren -F -n __warren_files
`;
}

/**
 * A completion script for one shell, generated from the command tree (see {@link completionTree}).
 *
 * @example
 * process.stdout.write(completionScript(buildProgram(), 'bash'));
 */
export function completionScript(program: Command, shell: CompletionShell): string {
  const root = completionTree(program);
  return shell === 'bash' ? bash(root) : shell === 'zsh' ? zsh(root) : fish(root);
}
