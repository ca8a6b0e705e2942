"""The word lists of the offline extractor, in one place."""

from __future__ import annotations


def wordset(text: str) -> frozenset[str]:
    """The words of ``text``, split on white space."""
    return frozenset(text.split())


#: Words that carry no fact on their own: pronouns, auxiliaries, fillers, feelings.
EMPTY = wordset(
    """
    a about absolutely again agree all also always am amazing an and any anything
    appreciate appreciated are as at awesome back be been being bet bit bummed busy but
    by can cool could definitely did do does doing done even ever everything excited
    exhausted fantastic feel feeling feels felt fine for from fun get gets getting glad
    go going gone gonna good got gotta grateful great guess had haha happy has have he
    hear heard her here hers him his hope hoped i i'd i'll i'm i've in is it it's its
    just keep kept kinda knew know lately let lets like little look looked looking looks
    lot lots love loved lovely loves made make makes many may me mean might mine more
    much must my myself need needed nervous never nice no not now of oh ok okay on one
    ones or other others our ours out own pretty proud really recently right sad said
    same saw say see shall she should so some something sorry sound sounds still stoked
    stressed stuff such super sure swamped talk talked talking tell thankful that that's
    the their them then there these they thing things think this those thought thrilled
    time times tired to today told too totally tried try trying understand up us very
    wanna want wanted was way we we're we've well went were what which who will wish
    with wonderful worried would wow yeah yep yes can't couldn't won't wouldn't don't
    didn't isn't wasn't haven't hasn't doesn't wait thanks thank please give giving
    quit quitting staying stay positive determined focused motivated confident
    optimistic hopeful pay off it'll end there
    """
)

#: Adverbs that may stand between a subject "I" and its verb.
ADVERBS = wordset(
    """
    absolutely actually already also always barely certainly currently def definitely
    especially even finally first generally honestly just kinda literally mainly mostly
    never normally now often only personally probably rarely really recently seriously
    sometimes sorta still totally truly typically usually
    """
)

#: Verbs after "I" that stay as they are for a third-person subject.
MODALS = wordset(
    """
    can could did had may might must shall should was were will would
    """
)

#: Irregular past-tense forms (also left as they are).
PAST = wordset(
    """
    ate beat became began bit blew bought broke brought built came caught chose cost cut
    dealt did dove drew drove dug fed fell felt fled flew forgave forgot fought found
    froze gave got grew had heard held hid hit hung hurt kept knelt knew laid lay led
    left lent let lit lost made meant met overcame paid put quit ran rang read rode rose
    said sang sank sat saw sent set shot shut slept slid sold spent spoke spun stole
    stood struck stuck swam swept swung taught thought threw told took tore understood
    was went woke won wore wrote
        learnt dreamt burnt leapt spelt
    """
)

#: Words a fact key leaves out.
STOP = wordset(
    """
    a also am an and are at be been for i i'd i'll i'm i've im in is it just me my of on
    or our really so that the this to us very was we were with
    """
)

#: Nationalities and faiths: "I'm Canadian" is not a name.
DEMONYMS = wordset(
    """
    american argentinian australian austrian belgian brazilian british buddhist canadian
    catholic chinese christian czech danish dutch egyptian english ethiopian filipino
    finnish french german ghanaian greek hindu indian indonesian irish israeli italian
    japanese jewish kenyan kiwi korean mexican muslim nigerian norwegian pakistani
    polish portuguese russian scottish spanish swedish swiss thai turkish ukrainian
    vietnamese welsh
    """
)

#: "I'm a bit ..." or "I'm a mother" is no occupation.
NOT_ROLES = wordset(
    """
    big bit couple dad fan father few huge little lot mom mother
    """
)

#: Present-tense verbs that end in -ed like a past form ("I need" is "she needs").
PRESENT_ED = wordset(
    """
    need feed seed speed bleed breed succeed proceed exceed heed embed shred shed wed
    """
)
